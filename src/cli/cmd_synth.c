/* PLACEHOLDER: replaced by the module that implements 'nightshift synth'. */
#include "cli/cli.h"

int cmd_synth(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("synth", "not implemented yet");
    return 1;
}
