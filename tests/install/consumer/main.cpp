// Compiles a rule against the installed library and checks that it fires.
#include <vigil/vigil.hpp>

#include <cstdio>

int main() {
  auto r = vigil::compile_string("when loss > 1 for 2 samples do stop", "consumer.rules");
  if (!r.ok()) {
    std::fputs(r.format_diagnostics().c_str(), stderr);
    return 1;
  }
  vigil::Engine engine(*r.program, {.unbound = vigil::UnboundActions::record});
  engine.observe(1, {{"loss", 2}});
  const auto fired = engine.observe(2, {{"loss", 3}});
  std::printf("fired %zu\n", fired.size());
  return fired.size() == 1 ? 0 : 1;
}
