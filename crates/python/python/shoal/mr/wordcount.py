"""Word count for shoal.mr, by `shoal mr run wordcount`'s rule: a word is a run of ASCII
letters and digits, lower-cased (keys are str, counts int).

    shoal.mr.run(path, map="shoal.mr.wordcount:map", combine="shoal.mr.wordcount:combine")
"""

import re
from collections import Counter

from . import add

_WORD = re.compile(rb"[A-Za-z0-9]+")


def map(piece):
    # One Counter per piece: a word seen many times crosses into the engine once.
    counts = Counter(_WORD.findall(piece.lower()))
    return {word.decode("ascii"): n for word, n in counts.items()}


# Counts are summed by the workers themselves (see shoal.mr.add): no call into Python.
combine = add
