"""CLI commands kept in modules of their own. The group (turnlog.cli_group) imports each module the
first time one of its commands is used, and the module registers its commands on ``cli`` then;
importing this package loads none of them (:func:`turnlog.cli_group.load_commands` loads them all)."""
