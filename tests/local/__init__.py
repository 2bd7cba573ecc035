"""The local tooling: tierq.devstack's private servers and the reuse of DATABASE_URL /
VALKEY_URL."""
