// `patternProperties` in linear time. valijson 1.0 matches its patterns
// against an answer's keys with std::regex, a backtracking matcher whose
// time a caller's pattern can make exponential (and which recurses per
// character). pgw's copy of a schema hands valijson each pattern's
// subschema (and additionalProperties') under a key that matches nothing,
// so valijson parses them where they sit (their `$ref`s resolve) but never
// applies them; the check here, `pattern_properties_keyword` beside them,
// matches the real patterns with RE2 within the pattern bounds and applies
// the subschemas valijson parsed (`link_pattern_properties` finds them
// once the schema is compiled), and additionalProperties to the keys that
// neither `properties` nor a pattern names.

#include "actors/structured_checks.hpp"

#include "actors/structured_check_kit.hpp"

#include <re2/re2.h>
#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/constraint_builder.hpp>
#include <valijson/constraints/concrete_constraints.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/subschema.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validation_visitor.hpp>

#include <regex>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace pgw {

// No character matches [^\s\S]: valijson's std::regex_search of it over a
// key fails at each position (about 11 ns a byte: charged to the answer's
// pattern work below).
const char* const pattern_placeholder = "[^\\s\\S]pgw";

namespace {

using valijson::Subschema;
using valijson::adapters::BoostJsonAdapter;

class pattern_properties_check final
  : public check_of_ours<pattern_properties_check> {
public:
  struct pattern {
    std::string text;
    std::shared_ptr<const re2::RE2> re;
    const Subschema* sub = nullptr;
  };

  pattern_properties_check(std::vector<pattern> patterns,
                           std::set<std::string> names, bool additional)
    : patterns_(std::move(patterns)),
      names_(std::move(names)),
      has_additional_(additional) {
  }

  /// The subschemas valijson parsed under the placeholder's allOf, in
  /// order: the patterns', then additionalProperties'.
  void link(const std::vector<const Subschema*>& subs) const {
    for (size_t i = 0; i < patterns_.size() && i < subs.size(); ++i)
      patterns_[i].sub = subs[i];
    if (has_additional_ && subs.size() == patterns_.size() + 1)
      additional_ = subs.back();
  }

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (!target.isObject())
      return true;
    bool valid = true;
    target.applyToObject([&](const std::string& key,
                             const valijson::adapters::Adapter& value) {
      bool named = names_.count(key) != 0;
      bool matched = false;
      // valijson's search for the placeholder over this key.
      std::string spent;
      if (!spend_pattern_work(2 * std::max<size_t>(key.size(), 1), &spent)) {
        valid = false;
        if (results != nullptr)
          results->pushError(member_context(context, key), spent);
        return results != nullptr;
      }
      for (auto& p : patterns_) {
        std::string why;
        auto found = bounded_match(*p.re, key, &why);
        if (!found) {
          valid = false;
          if (results != nullptr)
            results->pushError(member_context(context, key),
                               "Property name checked against "
                               "patternProperties' '" + p.text + "': " + why);
          return results != nullptr;
        }
        if (!*found)
          continue;
        matched = true;
        if (!applies(p.sub, key, value, context, results)) {
          valid = false;
          if (results == nullptr)
            return false;
          results->pushError(context, "Failed to validate against schema "
                                      "associated with pattern '"
                                        + p.text + "'.");
        }
      }
      if (matched || named || !has_additional_)
        return true;
      if (!applies(additional_, key, value, context, results)) {
        valid = false;
        if (results == nullptr)
          return false;
        // valijson's words for each (additionalProperties false is
        // always invalid and says nothing below).
        if (additional_->getAlwaysInvalid())
          results->pushError(context, "Object contains a property that "
                                      "could not be validated using "
                                      "'properties', 'patternProperties' or "
                                      "'additionalProperties' constraints: '"
                                        + key + "'.");
        else
          results->pushError(context, "Failed to validate against additional "
                                      "properties schema");
      }
      return true;
    });
    return valid;
  }

private:
  /// `value` (the member `key`) against `sub`, with its errors below the
  /// member. A subschema never linked fails closed.
  static bool applies(const Subschema* sub, const std::string& key,
                      const valijson::adapters::Adapter& value,
                      const std::vector<std::string>& context,
                      valijson::ValidationResults* results) {
    auto* node = dynamic_cast<const BoostJsonAdapter*>(&value);
    if (sub == nullptr || node == nullptr)
      throw std::runtime_error("patternProperties: a subschema was not "
                               "linked");
    // valijson's own std::regex cache: unused by pgw's copies (their
    // patterns are ours), but its visitor takes one.
    thread_local std::unordered_map<std::string, std::regex> unused;
    valijson::ValidationVisitor<BoostJsonAdapter> visitor(
      *node, member_context(context, key), true, results, unused);
    return visitor.validateSchema(*sub);
  }

  // The subschemas are set once by `link_pattern_properties`, before any
  // validation (valijson hands its constraints out const).
  mutable std::vector<pattern> patterns_;
  std::set<std::string> names_;
  bool has_additional_;
  mutable const Subschema* additional_ = nullptr;
};

class pattern_properties_builder final : public valijson::ConstraintBuilder {
public:
  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    // {"patterns": [ECMA-262 texts], "names": [properties' keys],
    //  "additional": bool}, written by actors/structured_schema.cpp.
    std::vector<pattern_properties_check::pattern> patterns;
    std::set<std::string> names;
    bool additional = false;
    if (!value.isObject())
      throw std::runtime_error("patternProperties: not pgw's copy");
    value.applyToObject([&](const std::string& key,
                            const valijson::adapters::Adapter& v) {
      if (key == "patterns" && v.isArray()) {
        v.applyToArray([&](const valijson::adapters::Adapter& item) {
          std::string text;
          std::string why;
          if (!item.asString(text))
            throw std::runtime_error("patternProperties: a pattern is not a string");
          auto re = compile_pattern(text, &why);
          if (!re)
            throw std::runtime_error("patternProperties: " + why);
          patterns.push_back({text, std::move(re), nullptr});
          return true;
        });
      } else if (key == "names" && v.isArray()) {
        v.applyToArray([&](const valijson::adapters::Adapter& item) {
          std::string name;
          if (item.asString(name))
            names.insert(std::move(name));
          return true;
        });
      } else if (key == "additional") {
        v.asBool(additional);
      }
      return true;
    });
    return new pattern_properties_check(std::move(patterns), std::move(names),
                                        additional);
  }
};

/// Every subschema reachable from `root` once, through the constraints of
/// draft 7 that hold subschemas.
void each_subschema(const Subschema& root,
                    const std::function<void(const Subschema&)>& fn) {
  namespace c = valijson::constraints;
  std::set<const Subschema*> seen;
  std::vector<const Subschema*> todo{&root};
  auto add = [&](const Subschema* s) {
    if (s != nullptr && seen.insert(s).second)
      todo.push_back(s);
  };
  seen.insert(&root);
  while (!todo.empty()) {
    auto* s = todo.back();
    todo.pop_back();
    fn(*s);
    Subschema::ApplyFunction children = [&](const c::Constraint& k) {
      auto each = [&](auto, const Subschema* sub) {
        add(sub);
        return true;
      };
      if (auto* x = dynamic_cast<const c::AllOfConstraint*>(&k))
        x->applyToSubschemas(each);
      else if (auto* x = dynamic_cast<const c::AnyOfConstraint*>(&k))
        x->applyToSubschemas(each);
      else if (auto* x = dynamic_cast<const c::OneOfConstraint*>(&k))
        x->applyToSubschemas(each);
      else if (auto* x = dynamic_cast<const c::NotConstraint*>(&k))
        add(x->getSubschema());
      else if (auto* x = dynamic_cast<const c::ContainsConstraint*>(&k))
        add(x->getSubschema());
      else if (auto* x = dynamic_cast<const c::PropertyNamesConstraint*>(&k))
        add(x->getSubschema());
      else if (auto* x = dynamic_cast<const c::SingularItemsConstraint*>(&k))
        add(x->getItemsSubschema());
      else if (auto* x = dynamic_cast<const c::ConditionalConstraint*>(&k)) {
        add(x->getIfSubschema());
        add(x->getThenSubschema());
        add(x->getElseSubschema());
      } else if (auto* x = dynamic_cast<const c::DependenciesConstraint*>(&k)) {
        x->applyToSchemaDependencies(each);
      } else if (auto* x = dynamic_cast<const c::LinearItemsConstraint*>(&k)) {
        x->applyToItemSubschemas(each);
        add(x->getAdditionalItemsSubschema());
      } else if (auto* x = dynamic_cast<const c::PropertiesConstraint*>(&k)) {
        x->applyToProperties(each);
        x->applyToPatternProperties(each);
        add(x->getAdditionalPropertiesSubschema());
      }
      return true;
    };
    s->apply(children);
  }
}

} // namespace

void add_pattern_properties_check(valijson::SchemaParser& parser) {
  parser.addConstraintBuilder(pattern_properties_keyword,
                              new pattern_properties_builder);
}

void link_pattern_properties(const valijson::Subschema& root) {
  namespace c = valijson::constraints;
  each_subschema(root, [](const Subschema& s) {
    const Subschema* held = nullptr;
    std::vector<const pattern_properties_check*> checks;
    Subschema::ApplyFunction find = [&](const c::Constraint& k) {
      if (auto* x = dynamic_cast<const c::PropertiesConstraint*>(&k))
        x->applyToPatternProperties([&](const auto& key, const Subschema* sub) {
          if (std::string(key.c_str()) == pattern_placeholder)
            held = sub;
          return true;
        });
      else if (auto* x = dynamic_cast<const pattern_properties_check*>(&k))
        checks.push_back(x);
      return true;
    };
    s.apply(find);
    std::vector<const Subschema*> subs;
    if (held != nullptr) {
      Subschema::ApplyFunction list = [&](const c::Constraint& k) {
        if (auto* x = dynamic_cast<const c::AllOfConstraint*>(&k))
          x->applyToSubschemas([&](auto, const Subschema* sub) {
            subs.push_back(sub);
            return true;
          });
        return true;
      };
      held->apply(list);
    }
    for (auto* check : checks)
      check->link(subs);
  });
}

} // namespace pgw
