// Env files and the process environment (SPEC §3).

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace pgw;

namespace {

namespace fs = std::filesystem;

/// A file in a fresh temporary directory, removed with the directory.
class temp_dir {
public:
  temp_dir() {
    static int counter = 0;
    path_ = fs::temp_directory_path()
            / ("pgw-config-env-" + std::to_string(::getpid()) + "-"
               + std::to_string(++counter));
    fs::create_directories(path_);
  }

  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }

  std::string write(const std::string& name, const std::string& content) {
    auto file = path_ / name;
    std::ofstream out{file, std::ios::binary};
    out << content;
    return file.string();
  }

  const fs::path& path() const {
    return path_;
  }

private:
  fs::path path_;
};

/// Changes the working directory for the lifetime of the object.
class scoped_cwd {
public:
  explicit scoped_cwd(const fs::path& dir) : saved_(fs::current_path()) {
    fs::current_path(dir);
  }

  ~scoped_cwd() {
    fs::current_path(saved_);
  }

private:
  fs::path saved_;
};

/// Sets a process environment variable for the lifetime of the object.
class scoped_env {
public:
  scoped_env(std::string key, const std::string& value) : key_(std::move(key)) {
    ::setenv(key_.c_str(), value.c_str(), 1);
  }

  ~scoped_env() {
    ::unsetenv(key_.c_str());
  }

private:
  std::string key_;
};

std::string message_of(const caf::error& err) {
  auto detail = detail_of(err);
  return detail != nullptr ? detail->message : std::string{};
}

} // namespace

TEST_CASE("env file: plain pairs, comments, blank lines and export") {
  temp_dir dir;
  auto path = dir.write("a.env", "# a comment\n"
                                 "\n"
                                 "   # indented comment\n"
                                 "PLAIN=value\n"
                                 "export EXPORTED=yes\n"
                                 "SPACED = around equals \n"
                                 "EMPTY=\n"
                                 "URL=https://h/v1?a=b\n");
  auto env = read_env_file(path);
  REQUIRE(env);
  CHECK(env->size() == 5);
  CHECK(env->at("PLAIN") == "value");
  CHECK(env->at("EXPORTED") == "yes");
  CHECK(env->at("SPACED") == "around equals");
  CHECK(env->at("EMPTY") == "");
  CHECK(env->at("URL") == "https://h/v1?a=b");
}

TEST_CASE("env file: unquoted values are trimmed and end at ' #'") {
  temp_dir dir;
  auto path = dir.write("a.env", "A=  one two   # trailing comment\n"
                                 "B=x#not-a-comment\n"
                                 "C= # only a comment\n");
  auto env = read_env_file(path);
  REQUIRE(env);
  CHECK(env->at("A") == "one two");
  CHECK(env->at("B") == "x#not-a-comment");
  CHECK(env->at("C") == "");
}

TEST_CASE("env file: single quotes are literal") {
  temp_dir dir;
  auto path = dir.write("a.env",
                        "A='  spaced # not comment \\n \"x\" '  # comment\n");
  auto env = read_env_file(path);
  REQUIRE(env);
  CHECK(env->at("A") == "  spaced # not comment \\n \"x\" ");
}

TEST_CASE("env file: double quotes take backslash escapes") {
  temp_dir dir;
  auto path = dir.write("a.env", "A=\"say \\\"hi\\\"\\nback\\\\slash # kept\""
                                 " # comment\n"
                                 "B=\"{\\\"k\\\": 1}\"\n"
                                 "C=\"C:\\dir\"\n");
  auto env = read_env_file(path);
  REQUIRE(env);
  CHECK(env->at("A") == "say \"hi\"\nback\\slash # kept");
  CHECK(env->at("B") == "{\"k\": 1}");
  CHECK(env->at("C") == "C:\\dir");
}

TEST_CASE("env file: CRLF line endings") {
  temp_dir dir;
  auto path = dir.write("a.env", "A=1\r\nB='two'\r\n");
  auto env = read_env_file(path);
  REQUIRE(env);
  CHECK(env->at("A") == "1");
  CHECK(env->at("B") == "two");
}

TEST_CASE("env file: a later line wins over an earlier one") {
  temp_dir dir;
  auto path = dir.write("a.env", "A=1\nA=2\n");
  auto env = read_env_file(path);
  REQUIRE(env);
  CHECK(env->at("A") == "2");
}

TEST_CASE("env file: a line without '=' is an error naming file and line, "
          "without the text") {
  temp_dir dir;
  auto path = dir.write("bad.env", "A=1\n# comment\nsk-LINESECRET-9921\n");
  auto env = read_env_file(path);
  REQUIRE_FALSE(env);
  CHECK(code_of(env.error()) == error_code::invalid_config);
  auto msg = message_of(env.error());
  CHECK(msg.find(path + ":3:") != std::string::npos);
  CHECK(msg.find("malformed line") != std::string::npos);
  CHECK(msg.find("LINESECRET") == std::string::npos);
}

TEST_CASE("env file: an invalid key is an error naming the line") {
  temp_dir dir;
  for (auto line : {"1KEY=x", "MY-KEY=x", "=x", "export =x"}) {
    CAPTURE(line);
    auto path = dir.write("bad.env", std::string{"OK=1\n"} + line + "\n");
    auto env = read_env_file(path);
    REQUIRE_FALSE(env);
    CHECK(message_of(env.error()).find(path + ":2:") != std::string::npos);
  }
}

TEST_CASE("env file: unterminated quotes name line and key, not the value") {
  temp_dir dir;
  auto path = dir.write("bad.env", "\n\nAPI='sk-QUOTESECRET-1\n");
  auto env = read_env_file(path);
  REQUIRE_FALSE(env);
  auto msg = message_of(env.error());
  CHECK(msg == "env file " + path + ":3: API: unterminated single quote");
  path = dir.write("bad2.env", "TOKEN=\"sk-QUOTESECRET-2\\\"\n");
  env = read_env_file(path);
  REQUIRE_FALSE(env);
  msg = message_of(env.error());
  CHECK(msg == "env file " + path + ":1: TOKEN: unterminated double quote");
}

TEST_CASE("env file: text after a closing quote is an error") {
  temp_dir dir;
  auto path = dir.write("bad.env", "A='x'y\n");
  auto env = read_env_file(path);
  REQUIRE_FALSE(env);
  auto msg = message_of(env.error());
  CHECK(msg.find(path + ":1: A: unexpected text after the closing quote")
        != std::string::npos);
  path = dir.write("bad2.env", "A=\"x\" y\n");
  CHECK_FALSE(read_env_file(path));
}

TEST_CASE("env file: a key set twice is a warning naming its lines, and the last "
          "value still wins") {
  temp_dir dir;
  auto path = dir.write("twice.env", "LLM__GENERIC__A__TIMEOUT_S=5\n"
                                     "OTHER=x\n"
                                     "# LLM__GENERIC__A__TIMEOUT_S=6\n"
                                     "export LLM__GENERIC__A__TIMEOUT_S=7\n"
                                     "API_KEY='sk-TWICESECRET-1'\n"
                                     "LLM__GENERIC__A__TIMEOUT_S=8\n"
                                     "API_KEY=sk-TWICESECRET-2\n");
  std::vector<std::string> warnings;
  auto env = read_env_file(path, &warnings);
  REQUIRE(env);
  CHECK(env->at("LLM__GENERIC__A__TIMEOUT_S") == "8");
  CHECK(env->at("API_KEY") == "sk-TWICESECRET-2");
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0] == "env file " + path
                         + ": LLM__GENERIC__A__TIMEOUT_S is set on lines 1, 4 "
                           "and 6; the last one wins");
  CHECK(warnings[1] == "env file " + path
                         + ": API_KEY is set on lines 5 and 7; the last one "
                           "wins");
  // load_environment hands the same warnings on.
  std::vector<std::string> loaded;
  REQUIRE(load_environment(path, &loaded));
  CHECK(loaded == warnings);
  // A file without repeats has none.
  std::vector<std::string> none;
  REQUIRE(read_env_file(dir.write("once.env", "A=1\nB=2\n"), &none));
  CHECK(none.empty());
}

TEST_CASE("env file: a file that cannot be read is an error") {
  auto env = read_env_file("/nonexistent/pgw/.env");
  REQUIRE_FALSE(env);
  CHECK(message_of(env.error()).find("/nonexistent/pgw/.env")
        != std::string::npos);
}

TEST_CASE("env file: a directory is an error, not an empty file") {
  temp_dir dir;
  auto env = read_env_file(dir.path().string());
  REQUIRE_FALSE(env);
  CHECK(message_of(env.error()).find("is a directory") != std::string::npos);
  CHECK_FALSE(load_environment(dir.path().string()));
}

TEST_CASE("process_environment sees the process's variables") {
  scoped_env var{"PGW_TEST_PROCESS_ENV_1234", "v=1"};
  auto env = process_environment();
  REQUIRE(env.count("PGW_TEST_PROCESS_ENV_1234") == 1);
  CHECK(env.at("PGW_TEST_PROCESS_ENV_1234") == "v=1");
}

TEST_CASE("load_environment: the process environment overrides the file") {
  temp_dir dir;
  auto path = dir.write("x.env", "PGW_TEST_OVERRIDE_A=from-file\n"
                                 "PGW_TEST_FILE_ONLY_B=file-only\n");
  scoped_env var{"PGW_TEST_OVERRIDE_A", "from-process"};
  auto env = load_environment(path);
  REQUIRE(env);
  CHECK(env->at("PGW_TEST_OVERRIDE_A") == "from-process");
  CHECK(env->at("PGW_TEST_FILE_ONLY_B") == "file-only");
}

TEST_CASE("load_environment: an explicitly named missing file is an error") {
  temp_dir dir;
  auto missing = (dir.path() / "missing.env").string();
  auto env = load_environment(missing);
  REQUIRE_FALSE(env);
  CHECK(code_of(env.error()) == error_code::invalid_config);
  CHECK(message_of(env.error()).find(missing) != std::string::npos);
}

TEST_CASE("load_environment: ./.env is read only when it exists") {
  temp_dir dir;
  {
    scoped_cwd cwd{dir.path()};
    auto env = load_environment();
    REQUIRE(env);
    CHECK(env->count("PGW_TEST_DOTENV_C") == 0);
  }
  dir.write(".env", "PGW_TEST_DOTENV_C=dotenv\n");
  {
    scoped_cwd cwd{dir.path()};
    auto env = load_environment();
    REQUIRE(env);
    CHECK(env->at("PGW_TEST_DOTENV_C") == "dotenv");
  }
}

TEST_CASE("load_environment: a malformed default ./.env is an error") {
  temp_dir dir;
  dir.write(".env", "garbage\n");
  scoped_cwd cwd{dir.path()};
  auto env = load_environment();
  REQUIRE_FALSE(env);
  CHECK(message_of(env.error()).find(":1: malformed line")
        != std::string::npos);
}

TEST_CASE("config/.env.example loads, and its commented defaults are the "
          "real defaults") {
  auto path = std::string{PGW_SOURCE_DIR} + "/config/.env.example";
  auto env = read_env_file(path);
  REQUIRE(env);
  auto s = load_settings(*env);
  REQUIRE(s);
  auto sc = s->find("LLM");
  REQUIRE(sc != nullptr);
  REQUIRE(sc->sources.size() == 2);
  CHECK(sc->sources[0].provider == "generic");
  CHECK(sc->sources[1].provider == "openai");
  // Uncomment every "# KEY=value" line with a value: same settings, still
  // valid, and no warning (a default never warns).
  std::ifstream in{path};
  std::string line;
  std::string uncommented;
  int shown = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# ", 0) != 0)
      continue;
    auto text = line.substr(2);
    auto eq = text.find('=');
    if (eq == std::string::npos || eq + 1 == text.size()
        || text.find(' ') < eq)
      continue;
    uncommented += text + "\n";
    ++shown;
  }
  CHECK(shown >= 30);
  temp_dir dir;
  auto defaults = read_env_file(dir.write("defaults.env", uncommented));
  REQUIRE(defaults);
  for (auto& [key, value] : *defaults)
    (*env)[key] = value;
  auto with_defaults = load_settings(*env);
  REQUIRE(with_defaults);
  CHECK(with_defaults->warnings.empty());
  // The values only: the provenance comments differ by design (a value
  // set to its default comes from the source's key, not the built-in).
  auto values_only = [](const std::string& text) {
    std::string out, l;
    std::istringstream lines{text};
    while (std::getline(lines, l))
      if (l.rfind("# from the scope", 0) != 0
          && l.rfind("# built-in defaults", 0) != 0)
        out += l + "\n";
    return out;
  };
  CHECK(values_only(show_settings(*with_defaults))
        == values_only(show_settings(*s)));
}

TEST_CASE("config/.env.example names every key pgw reads") {
  std::ifstream in{std::string{PGW_SOURCE_DIR} + "/config/.env.example"};
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto text = buffer.str();
  auto keys = known_keys();
  for (auto& key : keys.global)
    CHECK_MESSAGE(text.find(key + "=") != std::string::npos, key);
  for (auto& suffix : keys.scope)
    CHECK_MESSAGE(text.find("LLM__" + suffix + "=") != std::string::npos,
                  suffix);
  for (auto& field : keys.source)
    CHECK_MESSAGE(text.find("__" + field + "=") != std::string::npos, field);
}
