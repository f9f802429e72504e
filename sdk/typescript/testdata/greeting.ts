// The Greeting custom resource's types, written by hand as `opkit generate
// types` might: the handlers in this directory are typed with them. (A
// generated type need not extend KubeObject; good.ts has one that does.)
import type { ObjectMeta } from "../opkit.js";

export interface GreetingSpec {
  name: string;
  language?: "en" | "fr" | "de";
}

export interface GreetingStatus {
  greeting?: string;
  language?: string;
  history?: string[];
}

export interface Greeting {
  apiVersion: "demo.example.com/v1";
  kind: "Greeting";
  metadata: ObjectMeta;
  spec: GreetingSpec;
  status?: GreetingStatus;
}
