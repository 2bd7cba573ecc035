"""Local PostgreSQL and Valkey/Redis for scripts, tests and the local stack.

    from tierq.local.services import ensure_services

    with ensure_services() as services:
        services.postgres.url   # postgresql://postgres@127.0.0.1:<port>/tierq
        services.valkey.url     # redis://127.0.0.1:<port>/0

``ensure_services(valkey_cluster=True)`` gives a three-master Valkey/Redis Cluster instead
(``PrivateValkeyCluster``; ``services.env()`` then adds ``VALKEY_CLUSTER=true``).

``DATABASE_URL`` / ``VALKEY_URL`` are used when set and answering; otherwise private
servers are started from local binaries under ``<repo>/.local/services``. From a shell:
``eval "$(python -m tierq.local.services up)"``, ``python -m tierq.local.services status|down``.

Modules: ``process`` (commands, ports, pids, logs, probes), ``install`` (binaries, apt-get,
the system user), ``server`` (``Service`` and the state directory), ``postgres``, ``valkey``,
``valkey_cluster`` (the private servers), ``services`` (``ensure_services`` and the rule
choosing between external and private servers).
"""

from tierq.local.services.postgres import PrivatePostgres
from tierq.local.services.process import LocalServicesError
from tierq.local.services.server import ExternalService, Service, default_state_dir, repo_root
from tierq.local.services.services import LocalServices, ensure_services, stop_private_services
from tierq.local.services.valkey import PrivateValkey
from tierq.local.services.valkey_cluster import PrivateValkeyCluster, flush_all_nodes

__all__ = [
    "ExternalService",
    "LocalServices",
    "LocalServicesError",
    "PrivatePostgres",
    "PrivateValkey",
    "PrivateValkeyCluster",
    "Service",
    "default_state_dir",
    "ensure_services",
    "flush_all_nodes",
    "repo_root",
    "stop_private_services",
]
