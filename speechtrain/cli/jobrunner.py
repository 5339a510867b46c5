"""``python -m speechtrain.cli.jobrunner EXIT_CODE_FILE ARGS...``: the ordinary ``speechtrain ARGS...``
command, plus its exit code written to a file so that a UI started later can tell how it ended, and every warning
it logged written to ``warnings.txt`` beside it (one per line), so that the page shows them where the user looks
(the tuner's load warning, a text front end's unknown symbols: they scrolled past in the output)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

#: the file beside the exit code that holds the job's warnings, one per line
WARNINGS_FILE = "warnings.txt"


class _WarningsFile(logging.Handler):
    """Appends each WARNING (and worse) record of the ``speechtrain`` loggers to a file, as one line."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.WARNING)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = " ".join(self.format(record).split())
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except Exception:  # noqa: BLE001 - a warning that cannot be kept must not stop the job
            self.handleError(record)


def main() -> int:
    code_file, argv = Path(sys.argv[1]), sys.argv[2:]
    code = 1
    try:
        from speechtrain.cli.main import main as cli_main
        from speechtrain.logs import setup_logging

        logger = setup_logging()
        (code_file.parent / WARNINGS_FILE).unlink(missing_ok=True)  # this run's warnings only
        logger.addHandler(_WarningsFile(code_file.parent / WARNINGS_FILE))
        code = int(cli_main(argv) or 0)
    except SystemExit as exc:  # argparse errors
        code = exc.code if isinstance(exc.code, int) else 2
        raise
    finally:
        code_file.write_text(f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
