from speechtrain.cli.main import main

raise SystemExit(main())
