"""The warm tier's TLS connections verify the server: chain and host name."""

from __future__ import annotations

from tierq.dal.warm_tier import WarmTier, client_options


def test_rediss_urls_verify_the_certificate_and_the_host_name() -> None:
    options = client_options("rediss://cache.example.internal:6379/0")
    assert options["ssl_cert_reqs"] == "required"
    assert options["ssl_check_hostname"] is True
    # and a client built from such a URL carries them to its connections
    tier = WarmTier.from_url("rediss://cache.example.internal:6379/0")
    kwargs = tier.client.connection_pool.connection_kwargs
    assert kwargs["ssl_cert_reqs"] == "required"
    assert kwargs["ssl_check_hostname"] is True
    tier.close()


def test_plain_urls_carry_no_tls_options() -> None:
    assert "ssl_cert_reqs" not in client_options("redis://127.0.0.1:6379/0")
