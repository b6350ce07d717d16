"""A replay's utilization frame (the Capacity page's busy chart, ``simulate --json``'s utilization): the share of
each time bucket a replica spent stepping."""
from __future__ import annotations

import numpy as np

from shapeviz.physics import default_deployment
from shapeviz.serving.simulator import fixed_requests, simulate


def test_a_replica_serving_one_request_is_busy_for_all_of_its_life() -> None:
    # one request on one replica: the replica steps from its arrival to its last token, without a pause, so every
    # bucket of the run (first arrival to last completion) is wholly busy, the buckets its long decode runs cross too
    result = simulate(fixed_requests(4_000, 3_000, 1), default_deployment(), rate_rps=1.0)
    busy = result.utilization["busy"].to_numpy()
    assert busy.size == 60
    np.testing.assert_allclose(busy, 1.0, rtol=1e-9)
    assert result.summary()["utilization"] > 0.999
