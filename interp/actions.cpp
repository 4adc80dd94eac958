// Actions: whether every `do` action has a callback (checked once, before
// the first observation), and dispatch of the firings of one observation to
// the callbacks. Must not touch rule state, columns or series: by the time
// dispatch() runs every rule has been evaluated.
#include <fmt/format.h>

#include <exception>

#include "interp/engine_impl.hpp"

namespace vigil {

void Engine::Impl::check_bindings() {
  if (bindings_checked) return;
  bindings_checked = true;
  if (options.unbound != UnboundActions::error) return;
  auto unbound = unbound_actions();
  if (!unbound.empty())
    throw Error("unbound actions:\n" + format_diagnostics(unbound, program.sources()));
}

std::vector<Diagnostic> Engine::Impl::unbound_actions() const {
  std::vector<Diagnostic> out;
  for (const auto& pr : plan->rules) {
    // The rule's actions, then each escalation's: the order of action_sites.
    std::vector<const std::string*> names;
    for (const auto& a : pr.rule.info.actions) names.push_back(&a.name);
    for (const auto& esc : pr.rule.info.escalations)
      for (const auto& a : esc.actions) names.push_back(&a.name);
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto& name = *names[i];
      if (callbacks.count(name)) continue;
      const auto& [file, range] = pr.rule.action_sites[i];
      out.push_back(
          {DiagLevel::error,
           "unbound-action",
           fmt::format("action '{}' of rule '{}' has no callback bound", name, pr.rule.info.name),
           file,
           range,
           {},
           {}});
    }
  }
  return out;
}

void Engine::Impl::dispatch() {
  // Callbacks run after every rule has been evaluated, so an action cannot
  // change what other rules see in this observation; observe() from inside
  // one throws (the flag), and the flag is cleared even if a callback throws.
  dispatching = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{dispatching};
  // A callback that throws must not cost the other actions of the
  // observation their call (a failing `alert` webhook must not keep another
  // rule's `stop` or `checkpoint` from running): every action is dispatched,
  // then the first exception is rethrown (engine.hpp, observe()).
  std::exception_ptr first_error;
  for (const auto& f : firings)
    for (const auto& a : *f.actions)
      if (auto it = callbacks.find(a.name); it != callbacks.end() && it->second) {
        try {
          it->second(f, a);
        } catch (...) {
          if (!first_error) first_error = std::current_exception();
        }
      }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace vigil
