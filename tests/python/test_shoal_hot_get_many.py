"""Hot keys in a Python pool's multiget (issue #28): `shoal.Client(servers=[...],
hot_replicas=R)` reads a hot key of a `get_many` from each of its replicas in turn, as single
gets do, with the same rule: a copy answers with its owner's CAS unique, and a write is seen by
every batch after it."""


import pytest
import shoal

from harness import addresses, eventually, hot_key_servers, talk


@pytest.fixture
def servers():
    with hot_key_servers() as servers:
        yield servers


def get_hits(servers):
    """Each server's `get_hits`, asked directly."""
    hits = []
    for s in servers:
        with s.connect() as sock:
            stats = talk(sock, b"stats\r\n", b"END\r\n").decode()
        hits.append(next(int(line.split()[2]) for line in stats.splitlines() if line.startswith("STAT get_hits ")))
    return hits


def test_a_hot_key_in_get_many_is_read_from_every_replica(servers):
    # Network reads: reads from shared memory are not seen by the servers' detection.
    client = shoal.Client(servers=addresses(servers), hashing="jump", local=False, hot_replicas=0,
                          hot_refresh=3600.0)
    hot, cold = b"hot:py:batch", b"cold:py:batch"
    client.set(hot, b"h1")
    client.set(cold, b"c1")

    def learned():
        for _ in range(200):
            client.get(hot)
        return hot in [k for k, _ in client.refresh_hot_keys()]
    eventually(learned)
    assert len(client.replicas_for(hot)) == 3
    for _ in range(3):  # the first batches fill the copies from the owner
        client.get_many([hot, cold])

    before = get_hits(servers)
    uniques = []
    for _ in range(30):
        found = client.gets_many([cold, hot, b"absent:py:batch"])
        assert sorted(found) == [cold, hot]
        assert found[cold][0] == b"c1" and found[hot][0] == b"h1"
        uniques.append(found[hot][1])
    after = get_hits(servers)
    cold_owner = addresses(servers).index(client.server_for(cold))
    hot_reads = [a - b - (30 if i == cold_owner else 0) for i, (b, a) in enumerate(zip(before, after))]
    assert hot_reads == [10, 10, 10], "each replica answers a third of the hot key's reads"
    assert len(set(uniques)) == 1 and uniques[0] != 0, f"every replica answers the owner's unique: {uniques}"
    assert client.cas(hot, b"h1x", uniques[0]) is True, "a cas with a copy's unique is the owner's to judge"
    assert client.cas(hot, b"h1y", uniques[0]) is False

    client.set(hot, b"h2")
    for _ in range(6):
        assert client.get_many([hot, cold]) == {hot: b"h2", cold: b"c1"}
    client.delete(hot)
    for _ in range(3):
        assert client.get_many([hot]) == {}
