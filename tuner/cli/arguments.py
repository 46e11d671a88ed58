"""Argument types and options that several commands share. Each type says what it takes in its
own message, since argparse would name the type's function for a value it cannot convert."""
import argparse
import os

DTYPE_HELP = ("the precision: float32 (default), float64, and on cuda only float16 (float32 accumulate and "
              "result) and the tensor-core ones tf32 (float32 in and out, TF32 multiplies) and float16-tc")
SIMULATE_HELP = "run on Numba's CUDA simulator (also when NUMBA_ENABLE_CUDASIM=1 or no GPU is found)"
# Set in the workers' environment where their $TUNER_STORAGE is the --devices parent's --storage.
STORAGE_GIVEN = "TUNER_STORAGE_FROM_COMMAND_LINE"


def add_backend(parser: argparse.ArgumentParser) -> None:
    """The required --backend of the commands that render, count or tune kernels."""
    from ..backends import BACKENDS

    parser.add_argument("--backend", required=True, choices=tuple(BACKENDS),
                        help="the GPU platform: cuda (NVIDIA, through numba-cuda) or roc (AMD, through numba-hip)")


def add_cache_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", metavar="DIR", type=_path, help="cache directory (default: $TUNER_CACHE_DIR, "
                        "else the user cache directory)")


def add_compile_workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compile-workers", type=_count, metavar="N",
                        help="processes that compile the next variants while one is measured (default on a GPU: "
                             "the host's cores less one per device, within its memory; 0 on the simulator, "
                             "which runs no compiled code)")


def add_storage(parser: argparse.ArgumentParser, default: str, recorded: bool = False) -> None:
    """--storage, and where `recorded` (a search, whose cache record names its storage) refused if a
    record could not keep it."""
    parser.add_argument("--storage", metavar="URL", type=_recorded_storage if recorded else _storage,
                        default=os.environ.get("TUNER_STORAGE"),
                        help=f"an Optuna storage URL, or a journal file path (default: $TUNER_STORAGE, else {default})")


def _path(text: str) -> str:
    """A path with a leading ~ expanded, which a shell leaves in `--option=~/x` (disk.user_path)."""
    from ..disk import user_path

    if not text:
        return text  # empty: not given (`--cache-dir "$UNSET"`), as an empty environment variable is
    try:
        return str(user_path(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# SQLAlchemy's dialects, and the name of PostgreSQL's that it dropped: "scheme:" before them is a database URL.
DATABASES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb", "oracle", "mssql")


def _misformed_url(text: str) -> str:
    """Why `text`, a database URL by its scheme, is not one SQLAlchemy takes, with the form it
    takes (and not the URL itself, which may hold a password); "" if it is, or is no database URL."""
    scheme, colon, rest = text.partition(":")
    dialect = scheme.partition("+")[0].lower()
    if not colon or dialect not in DATABASES:
        return ""
    if "://" not in text:  # it could be meant as a journal file
        return _misformed_form(scheme, dialect, rest) + " (a journal file: ./NAME)"
    return _misformed_form(scheme, dialect, rest)


def _misformed_form(scheme: str, dialect: str, rest: str) -> str:
    if dialect == "postgres":
        return "SQLAlchemy names PostgreSQL postgresql, not postgres: give postgresql://USER@HOST/DATABASE"
    if scheme != scheme.lower():
        return f"SQLAlchemy's dialect names are lowercase: give {scheme.lower()}:, not {scheme}:"
    if dialect == "sqlite" and not (rest.startswith("///") or rest == "//"):  # sqlite:// is refused when opened
        return "an SQLite URL is sqlite:////ABSOLUTE/PATH or sqlite:///RELATIVE/PATH (three slashes, then the path)"
    if not rest.startswith("//"):
        return f"a {dialect} URL is {scheme}://USER@HOST/DATABASE"
    return ""


def _storage(text: str, recorded: bool = False) -> str:
    """storage_location(`text`), refused where it is a $TUNER_STORAGE that is blank or padded with
    whitespace, a database URL in a form SQLAlchemy does not take, or where `recorded` a location
    that a cache record could not keep."""
    from ..disk import padded

    from_environment = text == os.environ.get("TUNER_STORAGE")
    # A --devices worker's $TUNER_STORAGE is its parent's --storage (STORAGE_GIVEN), typed as the user meant it.
    stray = from_environment and not os.environ.get(STORAGE_GIVEN) and padded(text, "journal path or URL")
    mistake = (stray and f"it {stray}, or unset it") or _misformed_url(text) or \
        recorded and _unkept(storage_location(text), "the storage's location")
    if mistake:
        raise argparse.ArgumentTypeError(("$TUNER_STORAGE: " if from_environment else "") + mistake)
    return storage_location(text)


def _recorded_storage(text: str) -> str:
    """A search's --storage (_storage), which its cache record names."""
    return _storage(text, recorded=True)


def storage_location(text: str) -> str:
    """A storage URL, or a journal file path, with a file's path made absolute (a leading ~
    expanded), so that the records and reports that name it hold wherever they are read. Empty
    is left empty: the default journal. Not checked (_storage checks)."""
    if not text or "://" not in text:
        return os.path.abspath(_path(text)) if text else text
    if text.startswith("sqlite"):  # a dialect name in capitals is refused (_misformed_url)
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(text)
        except ArgumentError:
            return text  # opening it says what is wrong
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            return url.set(database=os.path.abspath(_path(url.database))).render_as_string(hide_password=False)
    return text


def from_environment(storage: str | None) -> bool:
    """Whether the storage came from $TUNER_STORAGE, not from --storage (a --devices parent's
    included: STORAGE_GIVEN). Compared unchecked: a good --storage overrides a bad $TUNER_STORAGE."""
    try:
        return bool(storage) and not os.environ.get(STORAGE_GIVEN) and \
            storage == storage_location(os.environ.get("TUNER_STORAGE", ""))
    except argparse.ArgumentTypeError:  # a ~user that does not exist
        return False


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


def _integer(text: str, what: str, lowest: int, highest: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}") from None
    if value < lowest or (highest is not None and value > highest):
        raise argparse.ArgumentTypeError(f"must be {what}, not {value}")
    return value


def _count(text: str) -> int:
    return _integer(text, "a whole number, 0 or more", 0)


def _positive(text: str) -> int:
    return _integer(text, "a whole number, at least 1", 1)


SEED_LIMIT = 2**32  # NumPy's and Optuna's seeds are below it


def _seed(text: str) -> int:
    return _integer(text, f"a whole number from 0 to {SEED_LIMIT - 1}", 0, SEED_LIMIT - 1)


def _study_name(text: str) -> str:
    """A study name, which a cache record keeps (schema.Text: MAX_TEXT characters at most, each printable)."""
    from ..schema import MAX_TEXT

    if not text or len(text) > MAX_TEXT:
        raise argparse.ArgumentTypeError(f"must be a name of 1 to {MAX_TEXT} characters, not {len(text)} characters")
    mistake = _unkept(text, "the name")
    if mistake:
        raise argparse.ArgumentTypeError(mistake)
    return text


def _unkept(text: str, what: str) -> str:
    """Why a cache record could not keep `text` (`what` it is), a non-printing character, or ""."""
    from ..schema import unprintable

    odd = unprintable(text)
    return odd and (f"{what} holds a non-printing character ({odd}), which a cache record cannot keep: give one "
                    "without tabs, line breaks or other control characters")
