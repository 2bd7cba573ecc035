"""The local tooling: tierq.local.services's private servers and the reuse of DATABASE_URL /
VALKEY_URL."""
