"""Unit tests of the differential harness itself: transcript parsing and escapes, answer
normalization (CAS placeholders, ±1 clock fuzz, elided fields) and the diff. No server needed.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import transcript as tr  # noqa: E402
from replay import Exchange, Normalizer, diff  # noqa: E402


def lines(norm, data):
    return [(line.tokens, line.end) for line in norm.answer(data)]


def test_escapes_and_repetition():
    assert tr.expand(r"set k 0 0 2\r\n\x00\xff\r\n") == b"set k 0 0 2\r\n\x00\xff\r\n"
    assert tr.expand(r"{3*ab}\s\\\{") == b"ababab \\{"
    assert tr.expand("{cas2+1} {cas1-1}", cas_of=lambda k: {1: 10, 2: 20}[k]) == b"21 9"
    with pytest.raises(tr.CorpusError):
        tr.expand(r"\q")
    with pytest.raises(tr.CorpusError):
        tr.expand("{cas1}")


def test_parse_steps_and_options(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("# c\n== one\n@stats-names\n> a\\r\\n\n.. b\\r\\n\n@advance 2\n@reconnect\n"
                 ">! quit\\r\\n\n== two\n@expect-difference why\n>~ x\n>? y\n")
    one, two = tr.parse(f)
    assert one.stats_names and one.timed and not two.timed
    assert [s.kind for s in one.steps] == [">", "advance", "reconnect", ">!"]
    assert one.steps[0].text == r"a\r\nb\r\n"
    assert two.expect_difference == "why"


@pytest.mark.parametrize("text", ["> before a case\n", "== a\n== a\n> x\n", "== a\n@advance x\n",
                                  "== a\n> x\n@stats-names\n", "== a\n"])
def test_parse_refuses_bad_files(tmp_path, text):
    f = tmp_path / "bad.txt"
    f.write_text(text)
    with pytest.raises(tr.CorpusError):
        tr.parse(f)


def test_cas_placeholders_keep_identity():
    n = Normalizer()
    first = lines(n, b"VALUE k 0 1 77\r\nx\r\nEND\r\n")
    assert first[0] == (("VALUE", "k", "0", "1", "<cas1>"), "\r\n")
    assert lines(n, b"HD c77 c78 c0\r\n") == [(("HD", "c<cas1>", "c<cas2>", "c0"), "\r\n")]
    assert n.cas_value(2) == 78
    # A different numbering on another server normalizes the same way.
    m = Normalizer()
    lines(m, b"VALUE k 0 1 5\r\nx\r\nEND\r\n")
    assert lines(m, b"HD c5 c9 c0\r\n") == lines(Normalizer(), b"HD c1 c2 c0\r\n")


def test_changed_cas_is_not_hidden():
    a, b = Normalizer(), Normalizer()
    assert lines(a, b"HD c1\r\nHD c2\r\n") != lines(b, b"HD c1\r\nHD c1\r\n")


def test_data_blocks_are_not_interpreted():
    n = Normalizer()
    out = lines(n, b"VA 9 t5\r\nVALUE a 0\r\nEND\r\n")
    assert out[1] == (("VALUE a 0\r\n",), "")  # the block, its \r\n included, is verbatim
    assert out[1] != (("VALUE", "a", "0"), "\r\n")


def test_clock_fields_match_within_one_second():
    assert lines(Normalizer(), b"HD t10 l3\r\n") == lines(Normalizer(), b"HD t9 l4\r\n")
    assert lines(Normalizer(), b"HD t10\r\n") != lines(Normalizer(), b"HD t12\r\n")
    assert lines(Normalizer(), b"HD t-1\r\n") != lines(Normalizer(), b"HD t0\r\n")
    me = b"ME k exp=5 la=1 cas=3 fetch=no cls=1 size=70\r\n"
    other = b"ME k exp=4 la=0 cas=8 fetch=no cls=9 size=20\r\n"
    assert lines(Normalizer(), me) == lines(Normalizer(), other)
    assert lines(Normalizer(), me) != lines(Normalizer(), other.replace(b"no", b"yes"))


def test_version_and_stats_are_set_aside():
    assert lines(Normalizer(), b"VERSION 1.6.18\r\n") == lines(Normalizer(), b"VERSION 0.1\r\n")
    a = b"STAT pid 1\r\nSTAT uptime 5\r\nEND\r\n"
    b = b"STAT uptime 7\r\nSTAT pid 2\r\nEND\r\n"
    c = b"STAT pid 2\r\nEND\r\n"
    assert lines(Normalizer(), a) == lines(Normalizer(), c) == [(("END",), "\r\n")]
    assert lines(Normalizer(True), a) == lines(Normalizer(True), b)
    assert lines(Normalizer(True), a) != lines(Normalizer(True), c)


def test_line_endings_are_compared():
    assert lines(Normalizer(), b"STORED\r\n") != lines(Normalizer(), b"STORED\n")
    assert lines(Normalizer(), b"STORED\r\n") != lines(Normalizer(), b"STORED")


def test_diff_names_the_request_and_both_answers():
    case = tr.Case("f", "t", 3)
    n1, n2 = Normalizer(), Normalizer()
    ref = [Exchange(r"> get k\r\n", n1.answer(b"END\r\n"))]
    cand = [Exchange(r"> get k\r\n", n2.answer(b"ERROR\r\n"))]
    text = diff(case, "memcached", ref, "shoal", cand)
    assert r"!! > get k\r\n" in text
    assert r"memcached: END\r\n" in text and r"shoal: ERROR\r\n" in text
    assert diff(case, "memcached", ref, "shoal", ref) is None


def test_sentinel_count_follows_mn_request_lines():
    from replay import _MN_REQUEST
    counts = [len(_MN_REQUEST.findall(c)) for c in
              (b"mn\r\n", b"get a\r\nmn\r\nmn extra\r\n", b"mn\n", b"xmn\r\n", b"get mn\r\n")]
    assert counts == [1, 2, 1, 0, 0]
