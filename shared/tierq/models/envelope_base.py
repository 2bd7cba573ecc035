"""The base of every response envelope (:mod:`tierq.models.envelopes`) and the
descriptions their fields share.

Apart from the envelopes of tasks so that the lease envelopes (claims, the outcomes of a
lease) can be defined without them: the claim and ack functions' cold start."""

from pydantic import ConfigDict

from tierq.models.base import Model

NEXT_DESCRIPTION = ("The cursor of the next page (the position of this page's last item): "
                    "pass it as ?after=; null on the last page. A page ends at its limit or "
                    "before it would overrun a Lambda response (6 MB), so it may hold fewer "
                    "items than asked for.")
MORE_DESCRIPTION = ('With "all": true, each request acts on a bounded slice (at most 10,000 '
                    'dead letters, about 5 seconds): true when some may be left, so repeat the '
                    'request until it is false.')


class Envelope(Model):
    """A response body: unknown fields are ignored (a newer server may add some)."""

    model_config = ConfigDict(extra="ignore")
