package conversion

import (
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// ConvertObjects converts objects (JSON, as a ConversionRequest holds
// them) to desiredAPIVersion, in their order. The API server takes every
// object converted or none: the first object that fails fails them all,
// and the error names it.
func (c *Converter) ConvertObjects(objects []runtime.RawExtension, desiredAPIVersion string) ([]runtime.RawExtension, error) {
	gv, err := schema.ParseGroupVersion(desiredAPIVersion)
	if err != nil || gv.Group != c.group {
		return nil, fmt.Errorf("desired apiVersion %q is not of group %s", desiredAPIVersion, c.group)
	}
	out := make([]runtime.RawExtension, len(objects))
	for i, raw := range objects {
		var obj map[string]any
		if err := utiljson.Unmarshal(raw.Raw, &obj); err != nil {
			return nil, fmt.Errorf("object %d is not a JSON object: %w", i, err)
		}
		if obj == nil {
			return nil, fmt.Errorf("object %d is null, not an object", i)
		}
		converted, err := c.Convert(obj, gv.Version)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", describe(obj), err)
		}
		data, err := json.Marshal(converted)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", describe(obj), err)
		}
		out[i] = runtime.RawExtension{Raw: data}
	}
	return out, nil
}

// describe names an object in errors: kind namespace/name (apiVersion).
func describe(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		name = ns + "/" + name
	}
	return fmt.Sprintf("%v %s (%v)", obj["kind"], name, obj["apiVersion"])
}

// Review answers a ConversionReview, as the CRD's conversion webhook
// does: the response carries the request's uid and every object
// converted, or a Failure status whose message says which object failed
// and why (the API server shows it to the client).
func (c *Converter) Review(in *apiextensionsv1.ConversionReview) *apiextensionsv1.ConversionReview {
	out := &apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "ConversionReview"},
		Response: &apiextensionsv1.ConversionResponse{},
	}
	if in == nil || in.Request == nil {
		out.Response.Result = metav1.Status{Status: metav1.StatusFailure, Message: "the ConversionReview has no request"}
		return out
	}
	out.Response.UID = in.Request.UID
	objects, err := c.ConvertObjects(in.Request.Objects, in.Request.DesiredAPIVersion)
	if err != nil {
		out.Response.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
		return out
	}
	out.Response.ConvertedObjects = objects
	out.Response.Result = metav1.Status{Status: metav1.StatusSuccess}
	return out
}
