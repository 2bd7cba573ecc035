"""A private Valkey/Redis Cluster of three masters: the shape of ElastiCache Serverless
(always cluster mode) on this machine.

Each node is a ``valkey-server`` / ``redis-server --cluster-enabled yes`` in
``<state>/valkey-cluster/node-<i>/`` (pid file, log, ``nodes.conf``), without persistence:
every start forms a fresh, empty cluster. The cluster is formed without ``redis-cli``: each
node takes a third of the 16384 slots, then the first one meets the others. A node's cluster
bus listens on its port + 10000, so the ports are chosen at or below 55535, below the
kernel's usual ephemeral range, with both ports free.

``VALKEY_URL`` names the first node; a cluster client learns the others from it
(``VALKEY_CLUSTER=true``). ``flush_all_nodes`` empties every master: the whole cache lost.

Like ElastiCache with tierq's user group, the cluster refuses clients that do not
authenticate: its ``default`` user is off, and an ACL file (``users.acl``, hashed passwords)
defines two users whose passwords are made at the cluster's first start and kept in
``credentials.json`` (mode 0600) under its folder:

| user | access | used by |
| --- | --- | --- |
| ``tierq`` | ``valkey_auth.ACCESS_STRING`` (the template's) | ``url``, ``urls`` (``VALKEY_URL``) |
| ``tierq-admin`` | every key and command | ``admin_url``: forming, flushing, stopping |
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import secrets
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import redis
from redis.cluster import RedisCluster

from tierq.dal.valkey_auth import ACCESS_STRING
from tierq.local.services.install import require_valkey_binary
from tierq.local.services.process import (
    STOP_TIMEOUT,
    Kind,
    LocalServicesError,
    log_tail,
    make_dirs,
    pid_alive,
    port_is_free,
    read_int_line,
    run,
    say,
    wait_pid_gone,
)
from tierq.local.services.server import PrivateService
from tierq.local.services.valkey import server_pid

__all__ = [
    "ADMIN_USER",
    "APP_USER",
    "BUS_PORT_OFFSET",
    "MAX_NODE_PORT",
    "PrivateValkeyCluster",
    "cluster_enabled",
    "cluster_nodes",
    "flush_all_nodes",
]

MASTERS = 3
HASH_SLOTS = 16384
BUS_PORT_OFFSET = 10000  # the cluster bus of a node listens on its port + 10000
MAX_NODE_PORT = 65535 - BUS_PORT_OFFSET
# Node ports come from below Linux's default ephemeral range (32768-60999), so an outgoing
# connection cannot take a node's port between our check and its bind.
NODE_PORT_RANGE = (20000, 32767)
NODE_TIMEOUT_MS = 5000
PORT_ATTEMPTS = 5
APP_USER = "tierq"
ADMIN_USER = "tierq-admin"


def _client(port: int, timeout: float = 2.0,
            credentials: tuple[str, str] | None = None) -> redis.Redis:
    user, password = credentials if credentials is not None else (None, None)
    return redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=timeout,
                       socket_timeout=timeout, username=user, password=password)


def acl_file_text(passwords: dict[str, str]) -> str:
    """The nodes' ACL file: ``default`` off (a client must authenticate), tierq's user with
    the deployment's access string, an admin with everything; passwords stored hashed."""
    def hashed(user: str) -> str:
        return "#" + hashlib.sha256(passwords[user].encode()).hexdigest()

    return (f"user default off resetpass -@all\n"
            f"user {APP_USER} on {hashed(APP_USER)} {ACCESS_STRING.removeprefix('on ')}\n"
            f"user {ADMIN_USER} on {hashed(ADMIN_USER)} ~* &* +@all\n")


def _info(client: redis.Redis, section: str) -> dict[str, object]:
    return dict(client.info(section))


def cluster_enabled(url: str, timeout: float = 3.0) -> bool:
    """Whether the server at ``url`` runs in cluster mode (``CLUSTER INFO``, which tierq's
    ACL user may send, unlike ``INFO``; a server without cluster support refuses it)."""
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        client.execute_command("CLUSTER", "INFO")
        return True
    except redis.ResponseError:  # cluster support disabled (or refused): not a cluster
        return False
    finally:
        client.close()


@contextlib.contextmanager
def _cluster_client(url: str, timeout: float = 5.0) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        yield client
    finally:
        client.close()


def cluster_nodes(url: str) -> list[str]:
    """``host:port`` of every master of the cluster that ``url`` names a node of."""
    with _cluster_client(url) as client:
        return sorted(f"{node.host}:{node.port}" for node in client.get_primaries())


def flush_all_nodes(url: str) -> None:
    """FLUSHALL on every master of the cluster ``url`` names a node of: the whole cache
    lost at once, as when a cache is replaced. A user that may not FLUSHALL (tierq's own,
    ``-@dangerous``) deletes every key it can see instead, one at a time (a cluster refuses
    keys of several slots in one command)."""
    with _cluster_client(url) as client:
        try:
            client.flushall(target_nodes=RedisCluster.PRIMARIES)
        except redis.exceptions.NoPermissionError:
            for node in client.get_primaries():
                direct = node.redis_connection
                keys = list(direct.scan_iter(count=1000))
                pipe = direct.pipeline(transaction=False)
                for key in keys:
                    pipe.unlink(key)
                pipe.execute()


def _pick_ports(count: int, avoid: set[int]) -> list[int]:
    """``count`` ports whose bus port (+10000) is free as well."""
    low, high = NODE_PORT_RANGE
    candidates = list(range(low, high + 1))
    random.shuffle(candidates)
    chosen: list[int] = []
    for port in candidates:
        if port in avoid or port + BUS_PORT_OFFSET in avoid:
            continue
        if port_is_free(port) and port_is_free(port + BUS_PORT_OFFSET):
            chosen.append(port)
            avoid.update((port, port + BUS_PORT_OFFSET))
            if len(chosen) == count:
                return chosen
    raise LocalServicesError(f"could not find {count} free port pairs (p, p+{BUS_PORT_OFFSET}) "
                        f"in {low}-{high} on 127.0.0.1")


class _Node:
    """One cluster node's files: ``<root>/node-<index>/``."""

    def __init__(self, root: Path, index: int) -> None:
        self.dir = root / f"node-{index}"
        self.pid_file = self.dir / "server.pid"
        self.log_file = self.dir / "server.log"
        self.config_file = self.dir / "nodes.conf"

    def pid(self, port: int | None) -> int | None:
        """Pid of this node's server when it runs (a live process serving ``port``)."""
        return server_pid(self.pid_file, port)

    def forget(self) -> None:
        """A fresh node next time: no cluster membership, no data."""
        self.pid_file.unlink(missing_ok=True)
        self.config_file.unlink(missing_ok=True)
        (self.dir / "dump.rdb").unlink(missing_ok=True)


class PrivateValkeyCluster(PrivateService):
    """Three cluster-mode servers in ``<state>/valkey-cluster``, formed into one cluster with
    every slot covered. ``url`` names the first node."""

    kind: Kind = "valkey"
    cluster = True

    def __init__(self, state_dir: Path, masters: int = MASTERS,
                 node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        super().__init__(state_dir)
        if masters < 1:
            raise LocalServicesError(f"a cluster needs at least one master, not {masters}")
        self.masters = masters
        # how long the others wait before they call a silent master failed (CLUSTERDOWN)
        self.node_timeout_ms = node_timeout_ms
        self.root = state_dir / "valkey-cluster"
        self.nodes = [_Node(self.root, i) for i in range(masters)]
        self.ports: list[int] = self._saved_ports()
        self.port = self.ports[0] if self.ports else None
        self.credentials_file = self.root / "credentials.json"
        self.acl_file = self.root / "users.acl"

    # -- users

    def passwords(self) -> dict[str, str]:
        """Each user's password: the cluster's own, made when it first starts."""
        try:
            saved = json.loads(self.credentials_file.read_text())
        except (OSError, ValueError):
            saved = {}
        if isinstance(saved, dict) and {APP_USER, ADMIN_USER} <= set(saved):
            return {user: str(saved[user]) for user in (APP_USER, ADMIN_USER)}
        made = {user: secrets.token_urlsafe(24) for user in (APP_USER, ADMIN_USER)}
        make_dirs(self.root)
        descriptor = os.open(self.credentials_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                             0o600)
        with os.fdopen(descriptor, "w") as out:
            json.dump(made, out)
        return made

    def _credentials(self, user: str) -> tuple[str, str]:
        return user, self.passwords()[user]

    def _admin(self, port: int, timeout: float = 2.0) -> redis.Redis:
        return _client(port, timeout, self._credentials(ADMIN_USER))

    def admin_client(self, port: int, timeout: float = 2.0) -> redis.Redis:
        """A client of one node as the admin user (every command)."""
        return self._admin(port, timeout)

    def _url(self, port: int | None, user: str) -> str:
        name, password = self._credentials(user)
        return f"redis://{quote(name, safe='')}:{quote(password, safe='')}@127.0.0.1:{port}/0"

    # -- addresses

    def _saved_ports(self) -> list[int]:
        try:
            lines = self.port_file.read_text().split()
        except OSError:
            return []
        ports = [int(x) for x in lines if x.isdigit()]
        return ports if len(ports) == self.masters else []

    @property
    def url(self) -> str:
        """The first node, as tierq's user (with its password)."""
        return self._url(self.port, APP_USER)

    @property
    def admin_url(self) -> str:
        """The first node, as the admin user."""
        return self._url(self.port, ADMIN_USER)

    @property
    def urls(self) -> list[str]:
        """One URL per master, as tierq's user."""
        return [self._url(port, APP_USER) for port in self.ports]

    # -- process

    def node_pids(self) -> list[int | None]:
        ports: list[int | None] = list(self.ports) or [None] * self.masters
        return [node.pid(port) for node, port in zip(self.nodes, ports, strict=True)]

    @property
    def pid(self) -> int | None:
        """The first node's pid while every node runs; None otherwise."""
        pids = self.node_pids()
        return pids[0] if all(pid is not None for pid in pids) else None

    def is_up(self) -> bool:
        """Whether every node answers and sees the whole cluster with every slot served."""
        return self._cluster_problem() is None

    def _cluster_problem(self) -> str | None:
        if len(self.ports) != self.masters:
            return "no ports recorded"
        for port in self.ports:
            client = self._admin(port)
            try:
                info = _info(client, "cluster")
                if str(info.get("cluster_enabled")) != "1":
                    return f"127.0.0.1:{port} is not in cluster mode"
                state = {k: v for k, v in (
                    line.split(":", 1) for line in
                    client.execute_command("CLUSTER", "INFO").decode().split()
                    if ":" in line)}
            except (redis.RedisError, OSError) as exc:
                return f"127.0.0.1:{port}: {exc}"
            finally:
                client.close()
            if state.get("cluster_state") != "ok":
                return f"127.0.0.1:{port}: cluster_state {state.get('cluster_state')}"
            if state.get("cluster_known_nodes") != str(self.masters):
                return (f"127.0.0.1:{port} knows {state.get('cluster_known_nodes')} of "
                        f"{self.masters} nodes")
        return None

    def _start(self) -> None:
        if self.pid is not None:
            if self._wait_formed(self.start_timeout) is None:
                return
            say("private Valkey cluster runs but is not whole: starting it afresh")
        self._stop()
        binary = require_valkey_binary()
        make_dirs(self.root)
        descriptor = os.open(self.acl_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(acl_file_text(self.passwords()))
        started = time.monotonic()
        self.ports = self._start_nodes(binary)
        self.port = self.ports[0]
        self.port_file.write_text("".join(f"{port}\n" for port in self.ports))
        self._form()
        problem = self._wait_formed(self.start_timeout)
        if problem is not None:
            raise LocalServicesError(
                f"the Valkey cluster did not form within {self.start_timeout:.0f}s: {problem}\n"
                f"--- tail of {self.nodes[0].log_file} ---\n{log_tail(self.nodes[0].log_file)}")
        say(f"Valkey cluster of {self.masters} masters up in {time.monotonic() - started:.1f}s "
            f"at {', '.join(f'127.0.0.1:{p}' for p in self.ports)}")

    def _start_nodes(self, binary: Path) -> list[int]:
        """Start every node on free ports (saved ones when still free); returns the ports."""
        saved = self._saved_ports()
        reuse = (len(saved) == self.masters and max(saved) <= MAX_NODE_PORT
                 and all(port_is_free(p) and port_is_free(p + BUS_PORT_OFFSET) for p in saved))
        taken: set[int] = set()
        ports = saved if reuse else _pick_ports(self.masters, taken)
        taken.update(ports)
        taken.update(p + BUS_PORT_OFFSET for p in ports)
        for index, node in enumerate(self.nodes):
            for attempt in range(PORT_ATTEMPTS):
                error = self._start_node(binary, node, ports[index])
                if error is None:
                    break
                if attempt == PORT_ATTEMPTS - 1:
                    self._stop_nodes(ports)
                    raise LocalServicesError(error)
                # someone took the port between our check and the bind: try another one
                [ports[index]] = _pick_ports(1, taken)
        return ports

    def _start_node(self, binary: Path, node: _Node, port: int) -> str | None:
        """Start one node; None once it answers as ours, else why not."""
        make_dirs(node.dir)
        node.forget()
        code, out = run(
            [binary, "--port", str(port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", node.config_file,
             "--cluster-node-timeout", str(self.node_timeout_ms),
             "--aclfile", self.acl_file,
             "--save", "", "--appendonly", "no", "--dir", node.dir,
             "--daemonize", "yes", "--pidfile", node.pid_file, "--logfile", node.log_file],
            what=binary.name, check=False, cwd=node.dir, timeout=self.start_timeout)
        if code != 0:
            return (f"{binary.name} did not start on port {port} (exit {code}):\n{out.strip()}"
                    f"\n--- tail of {node.log_file} ---\n{log_tail(node.log_file)}")
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            pid = read_int_line(node.pid_file)
            if pid is not None:
                # the pid file exists once the server listens; check that the server
                # answering is this one, not another's that holds the port
                client = self._admin(port)
                try:
                    answered = int(str(_info(client, "server").get("process_id")))
                    if answered == pid:
                        return None
                    return f"port {port} is served by another process (pid {answered})"
                except (redis.RedisError, OSError):
                    if not pid_alive(pid):
                        break
                finally:
                    client.close()
            time.sleep(0.05)
        return (f"{binary.name} on port {port} did not answer\n"
                f"--- tail of {node.log_file} ---\n{log_tail(node.log_file)}")

    def _form(self) -> None:
        """Give each node its share of the slots, then introduce the nodes to each other."""
        share = HASH_SLOTS // self.masters
        for index, port in enumerate(self.ports):
            first = index * share
            last = HASH_SLOTS - 1 if index == self.masters - 1 else first + share - 1
            client = self._admin(port, timeout=10.0)
            try:
                # distinct epochs, as `redis-cli --cluster create` sets them
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
                try:
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
                except redis.ResponseError:  # before Redis 7.0
                    client.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
            finally:
                client.close()
        # every pair meets directly: the cluster is whole sooner than by gossip alone
        for index, port in enumerate(self.ports[:-1]):
            client = self._admin(port, timeout=10.0)
            try:
                for other in self.ports[index + 1:]:
                    client.execute_command("CLUSTER", "MEET", "127.0.0.1", other)
            finally:
                client.close()

    def _wait_formed(self, timeout: float) -> str | None:
        """None once the cluster is whole, else the last problem seen at the deadline."""
        deadline = time.monotonic() + timeout
        problem = self._cluster_problem()
        while problem is not None and time.monotonic() < deadline:
            time.sleep(0.1)
            problem = self._cluster_problem()
        return problem

    def _stop(self) -> None:
        ports = self.ports or self._saved_ports()
        self._stop_nodes(ports)

    def _stop_nodes(self, ports: list[int]) -> None:
        pids = [node.pid(port) for node, port in zip(self.nodes, ports, strict=False)]
        running = [pid for pid in pids if pid is not None]
        if running:
            say(f"stopping private Valkey cluster (pids {', '.join(map(str, running))})...")
        for pid in running:  # no persistence: nothing to save, all can go at once
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in running:
            if not wait_pid_gone(pid, STOP_TIMEOUT):
                self._sigkill(pid)
                if not wait_pid_gone(pid, 10):
                    raise LocalServicesError(f"Valkey cluster node pid {pid} did not exit")
        for node in self.nodes:
            node.forget()

    def kill(self) -> None:
        """SIGKILL every node (a crash of the whole cache); `start()` forms a new one."""
        for pid in self.node_pids():
            if pid is not None:
                self._sigkill(pid)
                if not wait_pid_gone(pid, STOP_TIMEOUT):
                    raise LocalServicesError(f"Valkey cluster node pid {pid} survived SIGKILL")

    def flush_all(self) -> None:
        """FLUSHALL on every master."""
        for port in self.ports:
            client = self._admin(port, timeout=10.0)
            try:
                client.flushall()
            finally:
                client.close()

    def remove_files(self) -> None:
        """Delete the cluster's folder (after `stop()`)."""
        shutil.rmtree(self.root, ignore_errors=True)

