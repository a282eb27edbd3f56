// `propertyNames` with a reason. valijson 1.0 checks each key against the
// subschema with no results object, so a key that fails leaves no error:
// a re-asked model heard "a check that gives no reason failed" and not
// which key or why. Beside each `propertyNames` whose subschema holds no
// `$ref` (it is compiled on its own here), pgw's copy of the schema gets
// `property_names_keyword` with the same subschema: valijson's own check
// still decides (the first pass, no results), and this one, run only when
// the errors are listed, says which key failed and what is wrong with it.

#include "actors/structured_checks.hpp"

#include "actors/structured_check_kit.hpp"

#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/adapters/std_string_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <stdexcept>

namespace pgw {

namespace {

class property_names_check final
  : public check_of_ours<property_names_check> {
public:
  explicit property_names_check(std::shared_ptr<const valijson::Schema> sub)
    : sub_(std::move(sub)) {
  }

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    // Deciding is valijson's own `propertyNames`, beside this one.
    if (results == nullptr || !target.isObject())
      return true;
    bool valid = true;
    target.applyToObject([&](const std::string& name,
                             const valijson::adapters::Adapter&) {
      valijson::adapters::StdStringAdapter key(name);
      valijson::Validator validator;
      valijson::ValidationResults found;
      if (validator.validate(*sub_, key, &found))
        return true;
      valid = false;
      auto at = member_context(context, name);
      std::vector<std::string> words;
      valijson::ValidationResults::Error err;
      while (found.popError(err))
        words.push_back(std::move(err.description));
      // The specific words where there are any ("Failed to validate
      // against any schemas allowed by anyOf" only says a part failed).
      size_t specific = 0;
      for (auto& w : words)
        specific += summary_error(w) ? 0 : 1;
      bool any = false;
      for (auto& w : words) {
        if (specific > 0 && summary_error(w))
          continue;
        results->pushError(at, "Property name: " + w);
        any = true;
      }
      if (!any)
        results->pushError(at, "Property name: not allowed by the subschema "
                               "of 'propertyNames'");
      return true;
    });
    return valid;
  }

private:
  std::shared_ptr<const valijson::Schema> sub_;
};

class property_names_builder final : public valijson::ConstraintBuilder {
public:
  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    // valijson parses pgw's copy of the schema through BoostJsonAdapter
    // (actors/structured_schema.cpp), and hands a builder the member's.
    auto* node = dynamic_cast<const valijson::adapters::BoostJsonAdapter*>(&value);
    if (node == nullptr)
      throw std::runtime_error("propertyNames: not read from Boost.JSON");
    auto sub = std::make_shared<valijson::Schema>();
    valijson::SchemaParser parser{valijson::SchemaParser::kDraft7};
    add_checks_of_ours(parser);
    parser.populateSchema(*node, *sub);
    link_pattern_properties(*sub);
    return new property_names_check(std::move(sub));
  }
};

} // namespace

void add_property_names_check(valijson::SchemaParser& parser) {
  parser.addConstraintBuilder(property_names_keyword,
                              new property_names_builder);
}

} // namespace pgw
