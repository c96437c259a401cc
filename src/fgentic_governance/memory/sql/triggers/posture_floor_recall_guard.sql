-- requires: functions/scope_recall_guard
-- A floor's recall sets are validated as a scope's are (the scope's guard reads the same
-- column names): each NULL or 1..N distinct known values, the age 1 s .. 7 days.
DROP TRIGGER IF EXISTS posture_floor_recall_guard ON fgentic_memory.posture_floor;
CREATE TRIGGER posture_floor_recall_guard BEFORE INSERT OR UPDATE ON fgentic_memory.posture_floor
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.scope_recall_guard();
