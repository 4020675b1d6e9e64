package types

import (
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/fanout/fanout"
)

// option is one fanout.TypeOptions field as a types file names it: its
// JSON name, the Go API's name in snake_case.
type option struct {
	key   string // "batch_size"
	field string // "BatchSize"
	index int
	// zeroIsDefault: WithDefaults replaces a zero, so a file that writes 0
	// means nothing it could not say by leaving the field out, and is
	// refused ("page_size: 0" is a mistake, not the default).
	zeroIsDefault bool
}

var (
	optionsOnce sync.Once
	optionList  []option
	// optionNamer rewrites TypeOptions' field names in its errors to the
	// file's names.
	optionNamer *strings.Replacer
)

// options lists fanout.TypeOptions' fields, read from the type itself so a
// field added there is in types files at once, with its default.
func options() []option {
	optionsOnce.Do(func() {
		t := reflect.TypeFor[fanout.TypeOptions]()
		defaults := reflect.ValueOf(fanout.TypeOptions{}.WithDefaults())
		var pairs []string
		for i := range t.NumField() {
			sf := t.Field(i)
			key, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if key == "" || key == "-" || !sf.IsExported() {
				continue
			}
			optionList = append(optionList, option{key: key, field: sf.Name, index: i, zeroIsDefault: !defaults.Field(i).IsZero()})
			pairs = append(pairs, sf.Name, key)
		}
		optionNamer = strings.NewReplacer(pairs...)
	})
	return optionList
}

func optionNames() []string {
	var out []string
	for _, o := range options() {
		out = append(out, o.key)
	}
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// loadOptions reads the type's options from its fields and checks them as
// the Go API does (fanout.TypeOptions.Validate), naming the file's field.
func loadOptions(n Node, f Fields) fanout.TypeOptions {
	var o fanout.TypeOptions
	v := reflect.ValueOf(&o).Elem()
	for _, opt := range options() {
		c, ok := f.Get(opt.key)
		if !ok {
			continue
		}
		fv := v.Field(opt.index)
		switch {
		case fv.Type() == durationType:
			if d, ok := c.Duration(); ok {
				fv.SetInt(int64(d))
			}
		case fv.Kind() == reflect.String:
			if s, ok := c.String(); ok {
				fv.SetString(s)
			}
		case fv.CanInt():
			if i, ok := c.Int(); ok {
				if fv.OverflowInt(i) {
					c.Errorf("%d is out of range", i)
				} else {
					fv.SetInt(i)
				}
			}
		case fv.CanFloat():
			if x, ok := c.Float(); ok {
				fv.SetFloat(x)
			}
		default:
			c.Errorf("cannot be set in a types file")
		}
		if opt.zeroIsDefault && fv.IsZero() && c.y.Tag != "!!null" {
			if _, bad := lastErrorAt(n.l, c); !bad {
				c.Errorf("0 is not a value here: leave %s out for its default", opt.key)
			}
		}
	}
	if err := o.Validate(); err != nil {
		// "BatchSize: 6000 outside 1..5000": at the field's line when the
		// file gives it, else at the type's first line (a default that does not fit
		// the options given, such as call_timeout's with a short
		// deliver_timeout).
		msg := optionNamer.Replace(err.Error())
		key, rest, _ := strings.Cut(msg, ": ")
		if c, ok := f.Get(key); ok {
			c.Errorf("%s", rest)
		} else {
			n.child(key, n.y).Errorf("%s", rest)
		}
	}
	return o
}

// lastErrorAt reports whether the last error is at c (c's own read failed).
func lastErrorAt(l *loader, c Node) (*Error, bool) {
	if len(l.errs) == 0 {
		return nil, false
	}
	e, ok := l.errs[len(l.errs)-1].(*Error)
	return e, ok && e.Line == c.Line() && e.Field == c.path
}
