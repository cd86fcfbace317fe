#include "trace/scanned_values.h"

#include <cstring>
#include <utility>

#include "base/limits.h"
#include "trace/ascii.h"
#include "trace/json_fields.h"

namespace perftracker::trace::internal {

bool ScannedValueParser::IsMetadataKey(std::string_view key) {
  return key == "distributedInfo" || key == "deviceProperties" || key == "baseTimeNanoseconds" ||
         key == "host_name" || key == "hostname";
}

std::string_view ScannedValueParser::Scratch(std::string_view text) {
  const size_t n = text.size();
  if (scratch_.size() < n + kPad) scratch_.resize(n + kPad);
  std::memcpy(scratch_.data(), text.data(), n);
  std::memset(scratch_.data() + n, ' ', kPad);
  return std::string_view(scratch_.data(), n);
}

void ScannedValueParser::BadMetadata(uint64_t start, const char* why) {
  if (out_->bad_metadata++ == 0) {
    out_->first_bad_metadata_byte = start;
    out_->first_bad_metadata = why;
  }
}

Status ScannedValueParser::Error(uint64_t start, std::string_view key,
                                 simdjson::error_code e) const {
  return MalformedJson(name_, start, "in " + std::string(key) + ": " + simdjson::error_message(e));
}

Status ScannedValueParser::Metadata(std::string_view key, std::string_view text, uint64_t start) {
  text = Scratch(text);
  od::document doc;
  auto err = parser_.iterate(text.data(), text.size(), scratch_.size()).get(doc);
  if (err) return Error(start, key, err);
  TraceMeta& m = out_->meta;
  if (key == "baseTimeNanoseconds") {
    int64_t t;
    uint64_t u;
    double d;
    if (doc.get_int64().get(t) == simdjson::SUCCESS) {
      m.base_time_ns = t;
    } else if (doc.get_uint64().get(u) == simdjson::SUCCESS) {
      m.base_time_ns = static_cast<int64_t>(u >> 1);
    } else if (doc.get_double().get(d) == simdjson::SUCCESS && d > -9.2e18 && d < 9.2e18) {
      m.base_time_ns = static_cast<int64_t>(d);
    }
    return Status::Ok();
  }
  if (key == "host_name" || key == "hostname") {
    std::string_view s;
    if (doc.get_string().get(s) == simdjson::SUCCESS) m.host.assign(s);
    return Status::Ok();
  }
  if (key == "deviceProperties") return DeviceProperties(doc, start);
  return DistributedInfo(doc, start);
}

Status ScannedValueParser::DeviceProperties(od::document& doc, uint64_t start) {
  TraceMeta& m = out_->meta;
  od::array arr;
  if (doc.get_array().get(arr) != simdjson::SUCCESS) return Status::Ok();
  m.devices.clear();
  for (auto el : arr) {
    od::object obj;
    if (auto e = el.get_object().get(obj)) {
      if (!IsValueError(e)) return Error(start, "deviceProperties", e);
      continue;
    }
    DeviceInfo d;
    for (auto f : obj) {
      if (auto e = f.error()) return Error(start, "deviceProperties", e);
      od::field& field = f.value_unsafe();
      const char* k = field.key().raw();
      od::value& v = field.value();
      int64_t i = 0;
      if (KeyIs(k, "id")) {
        if (ReadInt(v, &i)) d.id = static_cast<int>(i);
      } else if (KeyIs(k, "name")) {
        ReadText(v, &d.name);
      } else if (KeyIs(k, "numSms")) {
        if (ReadInt(v, &i)) d.num_sms = static_cast<int>(i);
      } else if (KeyIs(k, "computeMajor")) {
        if (ReadInt(v, &i)) d.compute_major = static_cast<int>(i);
      } else if (KeyIs(k, "computeMinor")) {
        if (ReadInt(v, &i)) d.compute_minor = static_cast<int>(i);
      }
    }
    m.devices.push_back(std::move(d));
  }
  return Status::Ok();
}

Status ScannedValueParser::DistributedInfo(od::document& doc, uint64_t start) {
  TraceMeta& m = out_->meta;
  od::object obj;
  if (doc.get_object().get(obj) != simdjson::SUCCESS) return Status::Ok();
  for (auto f : obj) {
    if (auto e = f.error()) return Error(start, "distributedInfo", e);
    od::field& field = f.value_unsafe();
    const char* k = field.key().raw();
    od::value& v = field.value();
    int64_t i = 0;
    if (KeyIs(k, "rank")) {
      if (ReadInt(v, &i)) {
        if (limits::ValidRank(i)) {
          m.rank = static_cast<int>(i);
          out_->rank_from_trace = true;
        } else {
          BadMetadata(start, "a distributedInfo.rank from 0 to 1048575");
        }
      }
    } else if (KeyIs(k, "world_size")) {
      if (ReadInt(v, &i)) {
        if (limits::ValidWorldSize(i))
          m.world_size = static_cast<int>(i);
        else
          BadMetadata(start, "a distributedInfo.world_size from 1 to 1048576");
      }
    } else if (KeyIs(k, "backend")) {
      ReadText(v, &m.backend);
    } else if (KeyIs(k, "nccl_version")) {
      ReadText(v, &m.nccl_version);
    } else if (KeyIs(k, "pg_config")) {
      od::array arr;
      if (v.get_array().get(arr) != simdjson::SUCCESS) continue;
      m.process_groups.clear();
      for (auto el : arr) {
        od::object pg_obj;
        if (auto e = el.get_object().get(pg_obj)) {
          if (!IsValueError(e)) return Error(start, "distributedInfo", e);
          continue;
        }
        ProcessGroup pg;
        for (auto pf : pg_obj) {
          if (auto e = pf.error()) return Error(start, "distributedInfo", e);
          od::field& pfield = pf.value_unsafe();
          const char* pk = pfield.key().raw();
          od::value pv = pfield.value();
          if (KeyIs(pk, "pg_name")) {
            ReadText(pv, &pg.name);
          } else if (KeyIs(pk, "pg_desc")) {
            ReadText(pv, &pg.desc);
          } else if (KeyIs(pk, "backend_config")) {
            ReadText(pv, &pg.backend);
          } else if (KeyIs(pk, "pg_size")) {
            if (ReadInt(pv, &i)) pg.size = static_cast<int>(i);
          } else if (KeyIs(pk, "ranks")) {
            ReadRanks(pv, &pg.ranks);
          }
        }
        if (pg.size == 0) pg.size = static_cast<int>(pg.ranks.size());
        m.process_groups.push_back(std::move(pg));
      }
    }
  }
  return Status::Ok();
}

void ScannedValueParser::StepCandidate(std::string_view text) {
  text = Scratch(text);
  od::document doc;
  od::object obj;
  if (parser_.iterate(text.data(), text.size(), scratch_.size()).get(doc) ||
      doc.get_object().get(obj)) {
    return;
  }
  std::string_view name, cat, ph;
  bool has_name = false, has_cat = false, has_ts = false;
  Span span;
  for (auto f : obj) {
    if (f.error()) return;
    od::field& field = f.value_unsafe();
    const char* k = field.key().raw();
    od::value& v = field.value();
    if (KeyIs(k, "name")) {
      has_name = v.get_string().get(name) == simdjson::SUCCESS;
    } else if (KeyIs(k, "cat")) {
      has_cat = v.get_string().get(cat) == simdjson::SUCCESS;
    } else if (KeyIs(k, "ph")) {
      if (v.get_string().get(ph)) return;
    } else if (KeyIs(k, "ts")) {
      has_ts = v.get_double().get(span.ts_us) == simdjson::SUCCESS;
    } else if (KeyIs(k, "dur")) {
      if (v.get_double().get(span.dur_us)) span.dur_us = 0;
    } else if (KeyIs(k, "tid")) {
      ReadId(v, &span.tid);
    }
  }
  if (!has_name || !has_ts || ph != "X") return;
  if (has_cat && !EqualsIgnoreCase(cat, "user_annotation") && !EqualsIgnoreCase(cat, "cpu_op") &&
      !EqualsIgnoreCase(cat, "record_function") && !EqualsIgnoreCase(cat, "operator")) {
    return;  // e.g. the gpu_user_annotation copy of ProfilerStep#N on the GPU timeline
  }
  if (StartsWith(name, "ProfilerStep#")) {
    int64_t n = -1;
    for (char c : name.substr(13)) {
      if (c < '0' || c > '9' || n > (int64_t{1} << 50)) break;
      n = (n < 0 ? 0 : n) * 10 + (c - '0');
    }
    if (n < 0) return;
    span.step = n;
    out_->meta.profiler_steps.push_back(span);
  } else if (StartsWith(name, "Optimizer.step#")) {
    out_->meta.optimizer_steps.push_back(span);
  }
}

}  // namespace perftracker::trace::internal
