from tests.support.local_api import QueueNames, api, api_url, names

__all__ = ["QueueNames", "api", "api_url", "names"]
