"""Local PostgreSQL and Valkey/Redis for scripts, tests and the local stack.

    from tierq.devstack import ensure_services

    with ensure_services() as services:
        services.postgres.url   # postgresql://postgres@127.0.0.1:<port>/tierq
        services.valkey.url     # redis://127.0.0.1:<port>/0

``ensure_services(valkey_cluster=True)`` gives a three-master Valkey/Redis Cluster instead
(``PrivateValkeyCluster``; ``services.env()`` then adds ``VALKEY_CLUSTER=true``).

``DATABASE_URL`` / ``VALKEY_URL`` are used when set and answering; otherwise private
servers are started from local binaries under ``<repo>/.local/services``. From a shell:
``eval "$(python -m tierq.devstack up)"``, ``python -m tierq.devstack status|down``.
"""

from tierq.devstack.services import (
    DevstackError,
    ExternalService,
    LocalServices,
    PrivatePostgres,
    PrivateValkey,
    Service,
    default_state_dir,
    ensure_services,
    repo_root,
    stop_private_services,
)
from tierq.devstack.valkey_cluster import PrivateValkeyCluster, flush_all_nodes

__all__ = [
    "DevstackError",
    "ExternalService",
    "LocalServices",
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
