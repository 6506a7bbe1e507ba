/* PLACEHOLDER: replaced by the module that implements 'nightshift generate'. */
#include "cli/cli.h"

int cmd_generate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("generate", "not implemented yet");
    return 1;
}
