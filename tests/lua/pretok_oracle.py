"""pretok_oracle.py - GPT-2's pre-tokenization by a regular-expression engine,
the oracle of test_text_tokenizer.lua for dlua's hand-written piece scanner.

GPT-2's pattern  's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
is rebuilt for Python's re with explicit classes: letters and numbers from
unicodedata categories (L*, N*), white space from Unicode's White_Space list
(shared with scripts/gen_unicode_classes.py, which writes dlua's tables).

Usage: python3 pretok_oracle.py FILE - FILE holds one hex-encoded UTF-8 text
per line; prints, per line, the hex-encoded pieces joined by commas.
"""
import itertools
import os
import re
import sys
import unicodedata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from gen_unicode_classes import WHITE_SPACE  # noqa: E402  (a list from Unicode's PropList.txt)


def cls(in_class):
    """A character class (for inside [...]) of the code points in_class accepts."""
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and in_class(cp)]
    parts = []
    for _, run in itertools.groupby(enumerate(cps), key=lambda p: p[1] - p[0]):
        run = list(run)
        parts.append("\\U%08x-\\U%08x" % (run[0][1], run[-1][1]))
    return "".join(parts)


def main():
    L = cls(lambda cp: unicodedata.category(chr(cp)).startswith("L"))
    N = cls(lambda cp: unicodedata.category(chr(cp)).startswith("N"))
    S = "".join("\\U%08x-\\U%08x" % r for r in WHITE_SPACE)
    pat = re.compile("'s|'t|'re|'ve|'m|'ll|'d| ?[%s]+| ?[%s]+| ?[^%s%s%s]+|[%s]+(?![^%s])|[%s]+"
                     % (L, N, S, L, N, S, S, S))
    out = []
    with open(sys.argv[1]) as f:
        for line in f:
            s = bytes.fromhex(line.strip()).decode("utf-8")
            out.append(",".join(p.encode("utf-8").hex() for p in pat.findall(s)))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
