"""The `glmflash` subcommands, one module each: `add_arguments(parser)` declares the flags and
`run(args) -> int` parses them into the library's calls, prints, and returns the exit status
(errors meant for the user raised as `CLIError`).

Commands sit above the library: they import it and it never imports them. Outside this
package only `flags.py` touches argparse, to derive a config dataclass's flags from its
`setting()` fields. This package's own import loads nothing, so `glmflash verify` and
`glmflash info` still start without torch.
"""
