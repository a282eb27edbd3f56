#include <cstdio>

int main() {
  std::puts("pgw-actor: under construction");
  return 1;
}
