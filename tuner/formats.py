"""How numbers are printed everywhere (counts, rates and times, one format each), and text that
tuner did not write (a driver's, a journal's)."""
import unicodedata


# Past these, a number is no measurement (a record edited by hand) and is shown in three digits,
# not in hundreds.
_LARGEST_RATE, _LARGEST_MILLISECONDS = 1e12, 1e12


def rate(gflops: float) -> str:
    """A rate as it is printed everywhere: whole GFLOP/s with thousands separators from 100 up (a
    GPU's 30,912, not 3.09e+04), three significant digits below (a simulated rate is tiny)."""
    return f"{gflops:,.0f} GFLOP/s" if 100 <= gflops < _LARGEST_RATE else f"{gflops:.3g} GFLOP/s"


def duration(seconds: float) -> str:
    """A time as it is printed everywhere: in ms to four significant digits (a GPU's 1.572 ms or
    0.01234 ms, a simulated 348.9 ms), whole ms with thousands separators from 1,000 up (a
    simulated 2,302 ms, not 2302 or 2.302e+03)."""
    milliseconds = seconds * 1e3
    if 1000 <= float(f"{milliseconds:.4g}") < _LARGEST_MILLISECONDS:  # 999.96 ms too, which 4 digits make 1000
        return f"{milliseconds:,.0f} ms"
    return f"{milliseconds:.4g} ms"


def counted(number: float, noun: str, plural: str = "") -> str:
    """A count as it is printed everywhere: `number` and `noun`, plural (`noun` + "s" unless
    `plural` is given) for any number but 1: 1 trial, 2 trials, 0 trials; 1 search, 3 searches; with
    thousands separators from 1,000 up, and a fraction only where there is one (a median's 1.5)."""
    shown = f"{number:,.6g}" if number != int(number) else f"{int(number):,}"
    return f"{shown} {noun if number == 1 else plural or noun + 's'}"


# The Unicode categories of the characters a terminal does not show as themselves: controls (an
# escape, a line break, a tab), formats (a bidi override, a zero-width space), surrogates, and the
# line and paragraph separators. Not str.isprintable's whole rule: it refuses every space but U+0020
# too (a no-break space, macOS's narrow no-break space in file names), which is shown as a space and
# forges nothing, and unassigned characters, which differ between Python versions reading one cache.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# The zero-width non-joiner and joiner are formats that words need (Persian, the Indic scripts) and
# that join emoji: they shape the characters beside them and move nothing.
_JOINERS = frozenset("\u200c\u200d")


def hidden(character: str) -> bool:
    """Whether a terminal does not show `character` as itself (_HIDDEN, less _JOINERS)."""
    return unicodedata.category(character) in _HIDDEN and character not in _JOINERS


def printable(text: str) -> str:
    """`text` with each character that is not shown as itself (hidden: an escape, a line break, a
    bidi override) replaced by U+FFFD, so that it cannot forge what a terminal shows."""
    return "".join("\ufffd" if hidden(character) else character for character in text)


def error_line(error: BaseException) -> str:
    """A variant's failure as it is recorded: the exception's type and the first line of its message,
    300 characters at most."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]
