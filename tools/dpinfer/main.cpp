// dpinfer: the library plus this main().
#include "dpinfer/cli/cli.h"

int main(int argc, char** argv) { return dpinfer::cli::run_cli(argc, argv); }
