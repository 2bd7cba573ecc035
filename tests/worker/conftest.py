from tests.client.test_worker_stop import recorded
from tests.support.local_api import QueueNames, api, api_url, names

__all__ = ["QueueNames", "api", "api_url", "names", "recorded"]
