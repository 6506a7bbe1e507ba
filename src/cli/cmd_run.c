/* PLACEHOLDER: replaced by the module that implements 'nightshift run'. */
#include "cli/cli.h"

int cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("run", "not implemented yet");
    return 1;
}
