// WriteBatch::NewestWrite: what a read after the batch's commit would see of
// a key, for reads of what was written in the same turn.
#include <gtest/gtest.h>

#include "storage/store.h"

namespace ztune::storage {
namespace {

TEST(WriteBatchTest, NewestWriteIsTheLastOpOnTheKeyInItsFamily) {
  WriteBatch b;
  EXPECT_EQ(b.NewestWrite(Family::kCheckpoints, "k"), nullptr);
  b.Put(Family::kCheckpoints, "k", "v1");
  b.Put(Family::kResults, "k", "other family");
  b.Put(Family::kCheckpoints, "k2", "other key");
  const WriteBatch::Op* op = b.NewestWrite(Family::kCheckpoints, "k");
  ASSERT_NE(op, nullptr);
  EXPECT_FALSE(op->is_delete);
  EXPECT_EQ(op->value, "v1");
  b.Delete(Family::kCheckpoints, "k");
  op = b.NewestWrite(Family::kCheckpoints, "k");
  ASSERT_NE(op, nullptr);
  EXPECT_TRUE(op->is_delete);
  b.Put(Family::kCheckpoints, "k", "v2");
  EXPECT_EQ(b.NewestWrite(Family::kCheckpoints, "k")->value, "v2");
  b.Clear();
  EXPECT_EQ(b.NewestWrite(Family::kCheckpoints, "k"), nullptr);
}

}  // namespace
}  // namespace ztune::storage
