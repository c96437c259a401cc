from fgentic_governance.cli import main

raise SystemExit(main())
