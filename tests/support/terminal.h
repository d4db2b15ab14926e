// A command run with its standard error on a terminal (a pseudo-terminal): what the CLI says
// only to a person watching (progress), tested.
#pragma once

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace adprof_test {

// What `command` writes on its standard error when that is a terminal (standard output goes
// to /dev/null), with `setting` ("NAME=VALUE") in its environment.
inline std::string stderr_on_a_terminal(const std::vector<std::string> &command,
                                        const char *setting) {
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    putenv(const_cast<char *>(setting));
    std::vector<char *> argv;
    for (const std::string &a : command) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(master, buf, sizeof buf)) > 0;) out.append(buf, n);  // EIO at exit
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  return out;
}

}  // namespace adprof_test
