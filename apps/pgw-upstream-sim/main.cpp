#include <cstdio>

int main() {
  std::puts("pgw-upstream-sim: under construction");
  return 1;
}
