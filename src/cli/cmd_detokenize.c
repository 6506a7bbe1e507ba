/* PLACEHOLDER: replaced by the module that implements 'nightshift detokenize'. */
#include "cli/cli.h"

int cmd_detokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("detokenize", "not implemented yet");
    return 1;
}
