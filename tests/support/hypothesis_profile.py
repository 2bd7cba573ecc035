"""The suite's Hypothesis settings: no timing checks, since speed is measured in bench/, not
asserted in tests.

Hypothesis by default fails an example that runs longer than 200 ms (``deadline``) and a
test whose data takes long to generate (``HealthCheck.too_slow``); on a loaded 2-core CI
machine either fails a correct test. Everything else (examples, shrinking, the database of
failures) stays Hypothesis' default."""

from hypothesis import HealthCheck, settings

settings.register_profile("tierq", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tierq")
