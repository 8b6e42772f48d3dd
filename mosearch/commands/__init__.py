"""CLI subcommands. Each module defines `add_parser(subparsers)` which registers itself with
`set_defaults(func=run)`; `mosearch.cli.COMMANDS` lists the modules in help order."""
