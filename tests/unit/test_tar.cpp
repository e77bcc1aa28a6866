// The WebDataset shards' ustar archives (io/tar_writer.h): what TarWriter writes, read_tar_members
// reads back, member by member; an archive cut short is refused, naming it.
#include <gtest/gtest.h>

#include "dpinfer/io/atomic_file.h"
#include "dpinfer/io/tar_writer.h"
#include "dpinfer/util/error.h"
#include "support/temp_dir.h"

using namespace dpinfer;

TEST(TarMembers, ReadsBackWhatTheWriterWroteInItsOrder) {
  test::TempDir dir;
  const std::string path = dir.file("000000000.tar");
  {
    io::AtomicFileWriter file(path);
    io::TarWriter tar(file);
    tar.add("000000000.png", std::string(700, 'x'), 1);
    tar.add("000000000.json", "{\"index\": 0}", 1);
    tar.add("000000001.json", std::string("{\"index\": 1, \"p\": \"\\u0000\"}"), 1);
    tar.add("000000001.txt", "", 1);
    tar.finish();
    file.sync();
    file.publish();
  }
  const auto json = io::read_tar_members(path, ".json");
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json[0].first, "000000000.json");
  EXPECT_EQ(json[0].second, "{\"index\": 0}");
  EXPECT_EQ(json[1].first, "000000001.json");
  const auto all = io::read_tar_members(path, "");
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].second, std::string(700, 'x'));
  EXPECT_EQ(all[3].second, "");

  const std::string whole = test::read_file(path);
  test::write_file(path, whole.substr(0, 1000));  // inside the png's bytes
  try {
    io::read_tar_members(path, ".json");
    FAIL() << "a cut archive was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ends inside a member"), std::string::npos) << e.what();
  }
}
