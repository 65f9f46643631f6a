"""What must (or must not) hold: properties over Ops and the Step observables."""
