package v1alpha1

// TriggerRequeue is the trigger of a run that a handler asked for with
// requeueAfter in its result: the same handler runs again for the object
// after that long. It is not a value of Handler.On.
const TriggerRequeue = "requeue"
