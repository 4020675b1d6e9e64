package validate

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// CheckRuleFile checks a Prometheus rule file (`groups:`) as Prometheus
// loads it: rulefmt's parser with unknown fields refused (group and rule
// fields, names, durations, label and annotation templates, duplicate
// groups), each expression parsed and type-checked by the PromQL parser,
// and each expression of the type its rule needs: an instant vector for an
// alert, a vector or a scalar for a recording rule.
func CheckRuleFile(content []byte) []error {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		return errs
	}
	if len(groups.Groups) == 0 {
		return []error{errors.New("no rule groups")}
	}
	for _, g := range groups.Groups {
		if len(g.Rules) == 0 {
			errs = append(errs, fmt.Errorf("group %q: no rules", g.Name))
		}
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				errs = append(errs, fmt.Errorf("group %q rule %q: %w", g.Name, name, err))
				continue
			}
			switch t := expr.Type(); {
			case r.Alert != "" && t != parser.ValueTypeVector:
				errs = append(errs, fmt.Errorf("group %q alert %q: expression %q is a %s; an alert needs an instant vector", g.Name, name, r.Expr, t))
			case r.Record != "" && t != parser.ValueTypeVector && t != parser.ValueTypeScalar:
				errs = append(errs, fmt.Errorf("group %q record %q: expression %q is a %s; a recording rule needs a vector or a scalar", g.Name, name, r.Expr, t))
			}
		}
	}
	return errs
}

// CheckPrometheusRule checks the groups of a PrometheusRule as a rule file.
func CheckPrometheusRule(pr *monitoringv1.PrometheusRule) []error {
	b, err := yaml.Marshal(pr.Spec)
	if err != nil {
		return []error{err}
	}
	return CheckRuleFile(b)
}
