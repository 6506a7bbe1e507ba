/* PLACEHOLDER: replaced by the module that implements 'nightshift bench'. */
#include "cli/cli.h"

int cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("bench", "not implemented yet");
    return 1;
}
