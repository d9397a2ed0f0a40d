"""Word count for shoal.mr, by `shoal mr run wordcount`'s rule: a word is a run of ASCII
letters and digits, lower-cased (keys are str, counts int).

    shoal.mr.run(path, map="shoal.mr.wordcount:map", combine="shoal.mr.wordcount:combine")
"""

from collections import Counter

from . import add

_ALNUM = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# Every byte that is not an ASCII letter or digit becomes a space, letters lower case: the words
# are then what bytes.split() finds: 43 ms per MiB of `shoal mr generate` text, where
# re.findall over the lower-cased piece took 58.
_WORDS_ONLY = bytes(b if b in _ALNUM else 0x20 for b in range(256)).lower()


def map(piece):
    # One Counter per piece: a word seen many times crosses into the engine once.
    counts = Counter(piece.translate(_WORDS_ONLY).split())
    return {word.decode("ascii"): n for word, n in counts.items()}


# Counts are summed by the workers themselves (see shoal.mr.add): no call into Python.
combine = add
