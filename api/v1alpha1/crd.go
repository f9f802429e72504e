package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Patterns the API server enforces on an Operator; internal/definition
// checks the same and more, with messages naming the field.
const (
	// GroupPattern is a DNS subdomain with at least one dot.
	GroupPattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`
	// KindPattern is a CamelCase identifier.
	KindPattern = `^[A-Z][A-Za-z0-9]*$`
	// ChildIDPattern is a CEL-friendly identifier.
	ChildIDPattern = `^[a-z][a-zA-Z0-9_]*$`
	// HandlerNamePattern is a DNS label.
	HandlerNamePattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// VersionPattern is a Kubernetes version name: v1, v1beta2, v2alpha1.
	VersionPattern = `^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$`
	// StateNamePattern is a state's name (and a transition's reason): an
	// identifier starting with an upper-case letter, like NeedsAttention.
	StateNamePattern = `^[A-Z][A-Za-z0-9_]*$`
)

func str(desc string) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "string", Description: desc}
}

func strList(desc string, maxItems int64) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "array", Description: desc, MaxItems: ptr.To(maxItems),
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To(int64(4096))}},
	}
}

func freeObject(desc string) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", Description: desc, XPreserveUnknownFields: ptr.To(true)}
}

// CustomResourceDefinition returns the CRD of operators.opkit.dev, which
// opkit installs.
func CustomResourceDefinition() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "operators." + Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "operators", Singular: "operator", Kind: Kind, ListKind: Kind + "List",
				ShortNames: []string{"opk"}, Categories: []string{"opkit"},
			},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Required:   []string{"spec"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": operatorSpecSchema(), "status": operatorStatusSchema()},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Kind", Type: "string", JSONPath: ".spec.resource.kind"},
					{Name: "Group", Type: "string", JSONPath: ".spec.resource.group"},
					{Name: "Watches", Type: "string", JSONPath: ".spec.watch.kind"},
					{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
					{Name: "Reason", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].reason`},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
	}
}

// template is the string schema of a template or a CEL expression, at
// most 4 KiB.
func template(desc string) apiextensionsv1.JSONSchemaProps {
	s := str(desc)
	s.MaxLength = ptr.To(int64(4096))
	return s
}

// operatorStatusSchema is the schema of an Operator's status.
func operatorStatusSchema() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"observedGeneration": {Type: "integer", Format: "int64"},
			"crd":                str("Name of the installed CRD."),
			"conditions": {
				Type:  "array",
				Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(freeObject("A metav1.Condition."))},
			},
		},
	}
}

// operatorSpecSchema is the schema of an Operator's spec.
func operatorSpecSchema() apiextensionsv1.JSONSchemaProps {
	group := str("API group of the custom resource, a DNS subdomain with at least one dot (e.g. demo.example.com).")
	group.Pattern, group.MaxLength = GroupPattern, ptr.To(int64(253))
	kind := str("CamelCase kind of the custom resource (e.g. Printer).")
	kind.Pattern, kind.MaxLength = KindPattern, ptr.To(int64(63))
	watch := watchSchema()
	return apiextensionsv1.JSONSchemaProps{
		Type: "object",
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "!(has(self.resource) && has(self.watch))",
			Message: "set at most one of resource (a custom resource the operator owns) and watch (objects it reacts to)",
		}},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"watch": watch,
			"resource": {
				Type:     "object",
				Required: []string{"group", "kind", "versions"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"group":       group,
					"kind":        kind,
					"scope":       {Type: "string", Enum: enum(NamespaceScoped, ClusterScoped), Description: "Defaults to Namespaced."},
					"readVersion": {Type: "string", Pattern: VersionPattern, Description: "The version children, status and handlers are written against; the engine reads custom resources at it. Defaults to the storage version."},
					"names": {
						Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"plural":     str("Defaults from the kind."),
							"singular":   str("Defaults from the kind."),
							"listKind":   str("Defaults to <Kind>List."),
							"shortNames": strList("Short names for kubectl.", 8),
							"categories": strList("Categories for kubectl get <category>.", 8),
						},
					},
					"versions": {
						Type: "array", MinItems: ptr.To(int64(1)), MaxItems: ptr.To(int64(16)),
						Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(versionSchema())},
						XListType:    ptr.To("map"),
						XListMapKeys: []string{"name"},
					},
				},
				XValidations: apiextensionsv1.ValidationRules{{
					Rule:    "size(self.versions) == 1 || self.versions.filter(v, has(v.storage) && v.storage).size() == 1",
					Message: "exactly one version must set storage: true",
				}},
			},
			"related": {
				Type: "array", MaxItems: ptr.To(int64(16)),
				Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(relatedSchema())},
				XListType:    ptr.To("map"),
				XListMapKeys: []string{"id"},
			},
			"children": {
				Type: "array", MaxItems: ptr.To(int64(64)),
				Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(childSchema())},
				XListType:    ptr.To("map"),
				XListMapKeys: []string{"id"},
			},
			"status": {
				Type: "object", Description: "Status fields of the custom resource, each a CEL template.",
				MaxProperties:        ptr.To(int64(64)),
				AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To(int64(4096))}},
			},
			"handlers": {
				Type: "array", MaxItems: ptr.To(int64(32)),
				Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(handlerSchema())},
				XListType:    ptr.To("map"),
				XListMapKeys: []string{"name"},
			},
			"sources": {
				Type: "array", MaxItems: ptr.To(int64(16)),
				Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(sourceSchema())},
				XListType:    ptr.To("map"),
				XListMapKeys: []string{"name"},
			},
			"states": {
				Type: "array", MaxItems: ptr.To(int64(64)),
				Description: "The life cycle of each custom resource: states, one initial, and the transitions between them (docs/states.md).",
				Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: ptr.To(stateSchema())},
			},
			"rollout": rolloutSchema(watch.Properties["selector"]),
		},
	}
}

// versionSchema is the schema of an item of spec.resource.versions.
func versionSchema() apiextensionsv1.JSONSchemaProps {
	versionName := str("Version name, e.g. v1.")
	versionName.Pattern = VersionPattern
	printerColumn := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"name", "type", "jsonPath"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":        str("Column header."),
			"type":        {Type: "string", Enum: enum("integer", "number", "string", "boolean", "date")},
			"format":      str("Optional OpenAPI format."),
			"description": str("Column description."),
			"priority":    {Type: "integer", Format: "int32"},
			"jsonPath":    str("JSON path in the object, e.g. .spec.text."),
		},
	}
	fieldConversion := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"field"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"field":        str("Path of the field in this version, e.g. spec.size."),
			"storageField": str("Path of the field in the storage version; defaults to field."),
			"toStorage":    template("CEL expression over self (this version's value) and object giving the storage version's value; defaults to self."),
			"fromStorage":  template("CEL expression over self (the storage version's value) and object giving this version's value; defaults to self."),
		},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "has(self.toStorage) == has(self.fromStorage)",
			Message: "give toStorage and fromStorage together: each direction needs its own",
		}},
	}
	return apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"name"},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "!(has(self.conversion) && has(self.storage) && self.storage)",
			Message: "the storage version is the hub every other version converts to and from: declare conversion on the other versions",
		}},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":           versionName,
			"served":         {Type: "boolean", Description: "Whether the API serves this version. Defaults to true."},
			"storage":        {Type: "boolean", Description: "The version stored in etcd; defaults to true for a single version."},
			"schema":         freeObject("OpenAPI v3 schema of .spec."),
			"statusSchema":   freeObject("OpenAPI v3 object schema of the status fields handlers write."),
			"printerColumns": {Type: "array", MaxItems: ptr.To(int64(32)), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &printerColumn}},
			"immutable":      strList("Fields that never change once an object is created, as dotted paths under spec (spec.region).", 64),
			"scale": {
				Type:     "object",
				Required: []string{"specReplicasPath", "statusReplicasPath"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"specReplicasPath":   str("JSON path of the desired replicas, under .spec."),
					"statusReplicasPath": str("JSON path of the observed replicas, under .status."),
					"labelSelectorPath":  str("JSON path of the label selector, under .status."),
				},
			},
			"conversion": {
				Type:        "object",
				Description: "How objects of this version convert to and from the storage version.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"fields": {Type: "array", MaxItems: ptr.To(int64(64)), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &fieldConversion}},
				},
			},
		},
	}
}

// relatedSchema is the schema of an item of spec.related.
func relatedSchema() apiextensionsv1.JSONSchemaProps {
	relatedID := str("Name of the related objects in expressions: related.<id>.")
	relatedID.Pattern, relatedID.MaxLength = ChildIDPattern, ptr.To(int64(63))
	return apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"id", "apiVersion", "kind"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"id":         relatedID,
			"apiVersion": str("API version of the kind, e.g. apps/v1."),
			"kind":       str("Kind, e.g. Deployment."),
			"name":       template("One object's name, a template over self, e.g. ${self.spec.deployment}."),
			"namespace":  template("Its namespace, a template over self; defaults to the custom resource's."),
			"namespaces": strList("The namespaces where the kind is read and watched for this reference; defaults to all.", 64),
			"selector": {
				Type: "object", Description: "Labels to match, each value a template over self: related.<id> is the list of matching objects.",
				MaxProperties:        ptr.To(int64(16)),
				AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: ptr.To(template(""))},
			},
		},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "has(self.name) != has(self.selector)",
			Message: "set exactly one of name and selector",
		}},
	}

}

// childSchema is the schema of an item of spec.children.
func childSchema() apiextensionsv1.JSONSchemaProps {
	childID := str("Name of the child in expressions: children.<id>.")
	childID.Pattern, childID.MaxLength = ChildIDPattern, ptr.To(int64(63))
	return apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"id", "template"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"id":          childID,
			"template":    freeObject("The child object, with ${...} CEL expressions in its strings."),
			"includeWhen": strList("CEL expressions; the child exists only while all are true.", 16),
			"readyWhen":   strList("CEL expressions over the child as `self`; all true means ready.", 16),
			"recreate":    {Type: "boolean", Description: "Delete and re-create the child when its template changes."},
		},
	}
}

// watchSchema is the schema of spec.watch.
func watchSchema() apiextensionsv1.JSONSchemaProps {
	selectorRequirement := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"key", "operator"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"key":      str("Label key."),
			"operator": {Type: "string", Enum: enum("In", "NotIn", "Exists", "DoesNotExist")},
			"values":   strList("Values, for In and NotIn.", 64),
		},
	}
	return apiextensionsv1.JSONSchemaProps{
		Type:        "object",
		Description: "Objects of any kind the operator reacts to without owning them.",
		Required:    []string{"apiVersion", "kind"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"apiVersion": str("API version of the kind, e.g. apps/v1."),
			"kind":       str("Kind, e.g. Deployment."),
			"namespaces": strList("Namespaces watched; defaults to all.", 64),
			"selector": {
				Type: "object", Description: "Label selector: only objects with these labels are watched.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"matchLabels": {
						Type: "object", MaxProperties: ptr.To(int64(32)),
						AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: ptr.To(str(""))},
					},
					"matchExpressions": {Type: "array", MaxItems: ptr.To(int64(32)), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &selectorRequirement}},
				},
			},
			"filter":    template("CEL condition over self; objects for which it is false are not watched."),
			"finalizer": {Type: "boolean", Description: "Hold opkit's finalizer on each watched object, so that delete handlers run before it is gone. Defaults to false."},
		},
	}
}

func enum(values ...string) []apiextensionsv1.JSON {
	out := make([]apiextensionsv1.JSON, len(values))
	for i, v := range values {
		out[i] = apiextensionsv1.JSON{Raw: []byte(`"` + v + `"`)}
	}
	return out
}

// rolloutSchema is spec.rollout's, with selector the label selector's.
func rolloutSchema(selector apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	selector.Description = "Moves the objects with these labels (a canary)."
	step := apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"count":    {Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Description: "Moves objects until this many are on the new definition."},
			"percent":  {Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Maximum: ptr.To(100.0), Description: "Moves objects until this percentage of them (rounded up) is on the new definition."},
			"selector": selector,
		},
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "[has(self.count), has(self.percent), has(self.selector)].filter(x, x).size() == 1",
			Message: "set exactly one of count, percent and selector",
		}},
	}
	return apiextensionsv1.JSONSchemaProps{
		Type:        "object",
		Description: "A change of the definition reaches the custom resources in steps, pausing when moved objects go unhealthy (docs/changing-operators.md).",
		Required:    []string{"steps"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"steps": {
				Type: "array", MinItems: ptr.To(int64(1)), MaxItems: ptr.To(int64(16)),
				Description: "The objects on the new definition after each step, counting those before; 100 percent is implied last.",
				Items:       &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &step},
			},
			"settle": duration("How long the objects moved so far must stay healthy before the next step. Defaults to 30s."),
		},
	}
}
