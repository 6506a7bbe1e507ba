/* PLACEHOLDER: replaced by the module that implements 'nightshift tokenize'. */
#include "cli/cli.h"

int cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("tokenize", "not implemented yet");
    return 1;
}
