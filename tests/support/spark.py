"""Where the Spark tests find the Glue job's code and the PostgreSQL JDBC driver (the Spark
session and the feeding fixtures are tests/spark/conftest.py)."""

from __future__ import annotations

from pathlib import Path

SPARK_GLUE = Path(__file__).resolve().parents[2] / "spark_glue"
JDBC_JAR = "/usr/share/java/postgresql.jar"  # Debian's libpostgresql-jdbc-java
