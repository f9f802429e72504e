"""The Greeting custom resource's types, as opkit generate types writes
them (written by hand here): what the handlers in testdata are typed with."""

from typing import Literal, NotRequired, TypedDict

import opkit_handler as opkit


class GreetingSpec(TypedDict):
    name: str
    language: NotRequired[Literal["en", "fr"]]


class GreetingStatus(TypedDict, total=False):
    greeting: str


class Greeting(TypedDict):
    apiVersion: str
    kind: str
    metadata: opkit.ObjectMeta
    spec: GreetingSpec
    status: NotRequired[GreetingStatus]


GreetContext = opkit.Context[Greeting, GreetingSpec]
GreetResult = opkit.Result[GreetingStatus]
