"""The command line: the Typer app, the Typer-free `tick`/`run`, rendering, `watch`.

Only this package prints; everything below it returns data."""
