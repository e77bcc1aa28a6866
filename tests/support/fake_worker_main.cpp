// dpinfer_test_worker: `dpinfer generate` with the fake pipeline (tests only).
#include "support/fake_pipeline.h"

int main(int argc, char** argv) { return dpinfer::worker::generate_main(argc, argv, dpinfer::test::make_fake_pipeline); }
