"""``python -m speechtrain.cli.jobrunner EXIT_CODE_FILE ARGS...``: the ordinary ``speechtrain ARGS...``
command, plus its exit code written to a file so that a UI started later can tell how it ended."""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> int:
    code_file, argv = Path(sys.argv[1]), sys.argv[2:]
    code = 1
    try:
        from speechtrain.cli.main import main as cli_main
        from speechtrain.logs import setup_logging

        setup_logging()
        code = int(cli_main(argv) or 0)
    except SystemExit as exc:  # argparse errors
        code = exc.code if isinstance(exc.code, int) else 2
        raise
    finally:
        code_file.write_text(f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
