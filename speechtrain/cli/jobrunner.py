"""``python -m speechtrain.cli.jobrunner EXIT_CODE_FILE ARGS...``: the ordinary ``speechtrain ARGS...``
command, plus its exit code written to a file so that a UI started later can tell how it ended, and every warning
it logged written to ``warnings.txt`` beside it (one per line), so that the page shows them where the user looks
(the tuner's load warning, a text front end's unknown symbols: they scrolled past in the output)."""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    code_file, argv = Path(sys.argv[1]), sys.argv[2:]
    code = 1
    try:
        from speechtrain.cli.main import main as cli_main
        from speechtrain.logs import WARNINGS_FILE, WarningsFile, setup_logging

        logger = setup_logging()
        (code_file.parent / WARNINGS_FILE).unlink(missing_ok=True)  # this run's warnings only
        logger.addHandler(WarningsFile(code_file.parent / WARNINGS_FILE))
        code = int(cli_main(argv) or 0)
    except SystemExit as exc:  # argparse errors
        code = exc.code if isinstance(exc.code, int) else 2
        raise
    finally:
        code_file.write_text(f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
