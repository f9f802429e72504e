package definition

import (
	"sync"

	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// valueSchema is the schema a child's values are read through in CEL. It
// is openapi.Schema with its sub-schemas built once: openapi.Schema builds
// a new map of copied properties on every field an expression reads,
// which made reading children.<id>.metadata.name cost more than the rest
// of the evaluation. A definition's schemas never change once compiled,
// so the memo is safe; sub-schemas are built on first use, which also
// bounds the work for recursive schemas.
type valueSchema struct {
	*openapi.Schema

	propsOnce sync.Once
	props     map[string]common.Schema
	itemsOnce sync.Once
	items     common.Schema
	addOnce   sync.Once
	add       common.SchemaOrBool
}

var _ common.Schema = (*valueSchema)(nil)

func newValueSchema(s *spec.Schema) *valueSchema {
	return &valueSchema{Schema: &openapi.Schema{Schema: s}}
}

// newValueSchemas wraps each child's schema; nil stays nil (untyped).
func newValueSchemas(schemas map[string]*spec.Schema) map[string]common.Schema {
	if schemas == nil {
		return nil
	}
	out := make(map[string]common.Schema, len(schemas))
	for id, s := range schemas {
		if s != nil {
			out[id] = newValueSchema(s)
		}
	}
	return out
}

func (s *valueSchema) Properties() map[string]common.Schema {
	s.propsOnce.Do(func() {
		if s.Schema.Schema.Properties == nil {
			return
		}
		s.props = make(map[string]common.Schema, len(s.Schema.Schema.Properties))
		for name, prop := range s.Schema.Schema.Properties {
			s.props[name] = newValueSchema(&prop)
		}
	})
	return s.props
}

func (s *valueSchema) Items() common.Schema {
	s.itemsOnce.Do(func() {
		if items := s.Schema.Schema.Items; items != nil && items.Schema != nil {
			s.items = newValueSchema(items.Schema)
		}
	})
	return s.items
}

func (s *valueSchema) AdditionalProperties() common.SchemaOrBool {
	s.addOnce.Do(func() {
		if ap := s.Schema.Schema.AdditionalProperties; ap != nil {
			v := &valueSchemaOrBool{allows: ap.Allows}
			if ap.Schema != nil {
				v.schema = newValueSchema(ap.Schema)
			}
			s.add = v
		}
	})
	return s.add
}

type valueSchemaOrBool struct {
	schema *valueSchema
	allows bool
}

func (b *valueSchemaOrBool) Schema() common.Schema {
	if b.schema == nil {
		return nil // an untyped nil, as openapi.SchemaOrBool gives
	}
	return b.schema
}

func (b *valueSchemaOrBool) Allows() bool { return b.allows }
