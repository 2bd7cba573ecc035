"""Data access: PostgreSQL (system of record) and Valkey (warm tier). No business rules here."""
