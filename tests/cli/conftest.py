from tests.client.conftest import QueueNames, api, api_url, names

__all__ = ["QueueNames", "api", "api_url", "names"]
