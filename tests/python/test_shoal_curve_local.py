"""Reads the Python client serves through shared memory reach the server's hit-ratio curve
(issue 27): a local read of a key in the curve's sample enters it, a local read of a key
outside the sample does not. Which key is which, the server itself says, by screening the same
keys read over the network."""

import socket
import time

import shoal
from harness import Server


def ask(address, request: bytes, end: bytes) -> bytes:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while not data.endswith(end):
            chunk = sock.recv(1 << 20)
            assert chunk, data
            data += chunk
        return data


def curve_stats(address) -> dict:
    """The `curve` answer's values other than its points."""
    lines = ask(address, b"curve\r\n", b"END\r\n").decode().splitlines()
    pairs = (line.split(" ")[1:] for line in lines if line.startswith("STAT ") and "hit_ratio" not in line)
    return {name: float(value) for name, value in pairs}


def cmd_get(address) -> int:
    lines = ask(address, b"stats\r\n", b"END\r\n").decode().splitlines()
    return next(int(line.split()[2]) for line in lines if line.startswith("STAT cmd_get "))


def eventually(condition, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_local_read_of_a_sampled_key_enters_the_curve_and_of_an_unsampled_key_does_not():
    with Server.shoal("--hit-curve", "--curve-half-life", "0") as server:
        address = server.address
        # 13 000 keys read over the network overflow the 12 288-key sample once (the threshold
        # drops below its top); the flush then empties it, so a key read next is tracked
        # exactly when it is in the sample.
        warm = b"".join(b"get warm:%d\r\n" % i for i in range(13000))
        ask(address, warm + b"flush_all\r\n", b"OK\r\n")
        stats = curve_stats(address)
        assert stats["rate"] < 1 and stats["tracked"] == 0, stats

        network = shoal.Client(address, local=False, timeout=5.0)
        sampled = unsampled = None
        for i in range(2000):
            key = f"probe:{i}"
            before = curve_stats(address)["tracked"]
            assert network.get(key) is None
            if curve_stats(address)["tracked"] == before + 1:
                sampled = sampled or key
            else:
                unsampled = unsampled or key
            if sampled and unsampled:
                break
        assert sampled and unsampled, "keys in and out of the sample"
        network.set(sampled, b"value")
        network.set(unsampled, b"value")

        local = shoal.Client(address, local=True, timeout=5.0)
        assert local.is_local()

        # The server publishes its threshold in the region within a fold (100 ms): read the
        # sampled key until its reads arrive.
        def sampled_read_arrives():
            assert local.get(sampled) == b"value"
            return curve_stats(address)["local_sampled"] >= 1

        eventually(sampled_read_arrives)
        base = curve_stats(address)

        # Outside the sample: counted as gets, never in the sample.
        gets = cmd_get(address)
        for _ in range(3):
            assert local.get(unsampled) == b"value"
        eventually(lambda: cmd_get(address) >= gets + 3)
        after = curve_stats(address)
        assert (after["local_sampled"], after["tracked"]) == (base["local_sampled"], base["tracked"]), after

        # In the sample: every read reaches the curve (a `curve` answer includes them at once).
        assert local.get(sampled) == b"value"
        assert local.get_many([sampled]) == {sampled: b"value"}
        after = curve_stats(address)
        assert after["local_sampled"] == base["local_sampled"] + 2, after
        assert after["local_outside"] == 0 and after["local_refused"] == 0, after
        local.close()
        network.close()
