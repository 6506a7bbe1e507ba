/* cli — the subcommands. Each cmd_* parses its own argv (argv[0] is the subcommand name) and returns the
 * process exit status: 0 ok, 1 runtime failure, 2 usage error. Only this layer may call exit(). */
#ifndef NS_CLI_H
#define NS_CLI_H

#define NS_VERSION "0.1.0"

int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);

/* The model path when -m is not given: $NIGHTSHIFT_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf if
 * it has been fetched (relative to the current directory or to the binary's repository), else
 * ../shared/models/stories260K.gguf. Returns a static string. */
const char *cli_default_model(void);

/* Prints "nightshift <cmd>: <msg>" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
