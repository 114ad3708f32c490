// `ztune export` (docs/cli.md): every stored result of every trial of an
// experiment as CSV or JSON lines, read page by page. CSV needs the union of
// all columns before its header, so its rows are spooled to an anonymous
// temporary file first: memory holds the trial list and one page of results,
// however many results there are. A file named with -o appears whole or not
// at all.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "client/command_calls.h"
#include "client/commands.h"
#include "client/json_util.h"
#include "client/output_file.h"
#include "client/results_export.h"
#include "client/table.h"
#include "common/printable.h"

namespace ztune::client {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// The CSV spool: flattened records as JSON lines in an anonymous file.
class CsvSpool {
 public:
  Status Open() {
    file_.reset(std::tmpfile());
    if (!file_) return Status::IOError(std::string("cannot create a temporary file: ") +
                                       std::strerror(errno));
    return Status::Ok();
  }

  Status Add(const Json& record) {
    Json flat = Json::object();
    for (auto& [k, v] : Flatten(record)) {
      columns_.insert(k);
      flat[k] = std::move(v);
    }
    const std::string line = DumpJson(flat) + "\n";
    if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size()) {
      return Status::IOError("writing the temporary file failed (disk full?)");
    }
    return Status::Ok();
  }

  Status WriteCsv(std::ostream& out) {
    const std::vector<std::string> columns = ExportColumns(columns_);
    out << CsvLine(columns);
    if (std::fflush(file_.get()) != 0 || std::fseek(file_.get(), 0, SEEK_SET) != 0) {
      return Status::IOError("rereading the temporary file failed");
    }
    std::string line;
    char buf[1 << 16];
    std::vector<std::string> fields(columns.size());
    auto emit = [&]() -> Status {
      Result<Json> row = ParseJson(line);
      if (!row.ok()) return Status::Internal("temporary file damaged: " + row.status().message());
      for (size_t i = 0; i < columns.size(); ++i) {
        const Json* v = FindField(*row, columns[i]);
        fields[i] = v == nullptr ? "" : CsvValue(*v);
      }
      out << CsvLine(fields);
      line.clear();
      return Status::Ok();
    };
    while (std::fgets(buf, sizeof(buf), file_.get()) != nullptr) {
      line += buf;
      if (!line.empty() && line.back() == '\n') {
        if (Status s = emit(); !s.ok()) return s;
      }
    }
    if (std::ferror(file_.get())) return Status::IOError("rereading the temporary file failed");
    if (!line.empty()) return emit();
    return Status::Ok();
  }

 private:
  File file_;
  std::set<std::string> columns_;
};

}  // namespace

int RunExport(const CommandContext& ctx, const std::string& experiment_id,
              const ExportOptions& options) {
  int code = kExitOk;
  std::optional<Json> trials_reply =
      CallAllPages(ctx, "trials", Json{{"experiment_id", experiment_id}}, "trials", &code);
  if (!trials_reply) return code;
  const Json& trials = ArrayField(*trials_reply, "trials");

  OutputFile sink(ctx.out, options.output);
  CsvSpool spool;
  const bool csv = options.format == ExportFormat::kCsv;
  for (Status s : {sink.Open(), csv ? spool.Open() : Status::Ok()}) {
    if (!s.ok()) {
      ctx.err << "error: " << s.message() << '\n';
      return kExitUsage;
    }
  }
  Status write_status;
  auto add = [&](const Json& record) {
    if (csv) {
      write_status = spool.Add(record);
    } else {
      sink.out() << DumpJson(record) << '\n';
    }
    return write_status.ok();
  };

  uint64_t rows = 0;
  for (const Json& trial : trials) {
    const std::string trial_id = StringField(trial, "trial_id");
    if (trial_id.empty()) continue;
    bool any = false;
    const bool read = ForEachPage(
        ctx, "results", Json{{"trial_id", trial_id}}, "results",
        [&](Json& page) {
          for (const Json& r : page["results"]) {
            any = true;
            ++rows;
            if (!add(ExportRecord(trial, &r))) return false;
          }
          return true;
        },
        &code);
    if (!read) return code;
    if (write_status.ok() && !any) {
      ++rows;
      add(ExportRecord(trial, nullptr));
    }
    if (!write_status.ok()) break;
  }
  if (write_status.ok() && csv) write_status = spool.WriteCsv(sink.out());
  if (write_status.ok()) write_status = sink.Commit();
  if (!write_status.ok()) {
    ctx.err << "error: " << write_status.message() << '\n';
    return kExitUsage;
  }
  if (!options.output.empty() && options.output != "-") {
    ctx.err << "wrote " << rows << (rows == 1 ? " row" : " rows") << " (" << trials.size()
            << (trials.size() == 1 ? " trial" : " trials") << ") to "
            << EscapeControl(options.output) << '\n';
  }
  return kExitOk;
}

}  // namespace ztune::client
